// Package deploy has no code of its own: its tests check the deployment
// artefacts that live beside the Go packages, so that a change to one of them
// that breaks a promise fails `go test ./...` rather than a deployment.
//
//   - ../template.yaml, the AWS SAM stack: the two tables, the custom
//     resource that writes their config item (lambda/setup), the relay on
//     the messages table's stream, the sweeper on a one-minute schedule, the
//     least-privilege roles, the writer policy, log groups, alarms and the
//     dashboard. The tests parse it with yaml.v3 (CloudFormation's
//     short-form tags included), evaluate its intrinsic functions and Rules
//     under many parameter sets (each Kafka auth mode, MSK IAM, VPC, tuned)
//     and compare the resulting permissions, environment, alarms and
//     dashboard with what each function needs, exactly. Permissions are
//     derived from the code where it can be recorded: the DynamoDB calls a
//     Writer and dynamo.Configure make (through a recording client, on
//     DynamoDB Local), and the Kafka requests the publisher makes (recorded
//     on kfake, mapped to MSK IAM actions with AWS's table, and cross-checked
//     as Kafka ACLs on an ACL-enforcing kfake). When Python's samtranslator
//     and cfn-lint are installed, the template must transform and lint with
//     no error and no warning.
//   - ../localstack/, a Docker Compose setup (LocalStack community edition and
//     a single-node KRaft Kafka) and the script that builds, packages and
//     deploys the stack into it: the tests check that the compose file parses
//     and pins images that run without an auth token, that the script
//     parses (bash -n, shellcheck when present) and passes every parameter
//     the template requires, and, running it against stub docker, aws and go
//     commands, that it takes its steps in order and stops on a config item
//     with another bucket count or a failing function.
//   - ../docs/deploy.md must document every template parameter and alarm,
//     and ../docs/failures.md name the alarm of each fault.
package deploy
