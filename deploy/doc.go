// Package deploy has no code of its own: its tests check the deployment
// artefacts that live beside the Go packages, so that a change to one of them
// that breaks a promise fails `go test ./...` rather than a deployment.
//
//   - ../template.yaml, the AWS SAM stack: the two tables, the relay on the
//     messages table's stream, the sweeper on a one-minute schedule, the
//     least-privilege roles, log groups and alarms. The tests parse it with
//     yaml.v3 (CloudFormation's short-form tags included), evaluate its
//     intrinsic functions under several parameter sets (no auth, SASL/SCRAM,
//     MSK IAM, VPC) and compare the resulting permissions and environment
//     with what each function needs, exactly. When cfn-lint is on PATH, the
//     template must also lint without errors.
//   - ../localstack/, a Docker Compose setup (LocalStack community edition and
//     a single-node KRaft Kafka) and the script that builds, packages and
//     deploys the stack into it: the tests check that the compose file parses
//     and pins images that run without an auth token, that the script
//     parses (bash -n, shellcheck when present) and passes every parameter
//     the template requires, and, running it against stub docker, aws and go
//     commands, that it takes its steps in order and stops on a config item
//     with another bucket count or a failing function.
//   - ../docs/deploy.md must document every template parameter.
package deploy
