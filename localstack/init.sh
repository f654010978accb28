#!/usr/bin/env bash
# Deploys ../template.yaml into the LocalStack of docker-compose.yml, with the
# relay and the sweeper publishing to its Kafka (kafka:19092 on the compose
# network). Run it after `docker compose up -d` in this folder; see README.md.
#
# It needs Go, the AWS CLI (v1 or v2; no SAM CLI: CloudFormation in
# LocalStack runs the SAM transform), curl and Docker Compose (`docker
# compose` or `docker-compose`). It is idempotent: run it again after a
# change to redeploy.
#
# Settings (environment, all optional):
#   LOCALSTACK_ENDPOINT  http://localhost:4566
#   STACK_NAME           outbox
#   ARTIFACT_BUCKET      outbox-artifacts (S3 bucket in LocalStack for the zips)
#   OUTBOX_TOPIC         outbox-smoke (created, and checked by the functions at init)
#   BUCKET_COUNT         8 (the stack writes it to the outbox's config item)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)

endpoint=${LOCALSTACK_ENDPOINT:-http://localhost:4566}
stack=${STACK_NAME:-outbox}
artifacts=${ARTIFACT_BUCKET:-outbox-artifacts}
topic=${OUTBOX_TOPIC:-outbox-smoke}
bucket_count=${BUCKET_COUNT:-8}

# LocalStack accepts any credentials; the account is derived from the key.
export AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-test}
export AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-test}
export AWS_DEFAULT_REGION=${AWS_DEFAULT_REGION:-us-east-1}
export AWS_PAGER=""
aws=(aws --endpoint-url "$endpoint" --cli-read-timeout 300)

log() { printf 'init.sh: %s\n' "$*" >&2; }
die() {
	log "$*"
	exit 1
}
need() { command -v "$1" >/dev/null 2>&1 || die "$1 is required: $2"; }

need go "Go 1.26 or later (https://go.dev/dl/)"
need aws "the AWS CLI (pip install awscli, or AWS CLI v2)"
need curl "curl"
need docker "Docker with Compose"
if docker compose version >/dev/null 2>&1; then
	compose=(docker compose -f "$here/docker-compose.yml")
elif command -v docker-compose >/dev/null 2>&1; then
	compose=(docker-compose -f "$here/docker-compose.yml")
else
	die "Docker Compose is required (docker compose, or docker-compose)"
fi

# The binaries must match the functions' Architecture, and LocalStack runs
# Lambda containers natively: build for this machine.
case "$(uname -m)" in
x86_64 | amd64) goarch=amd64 lambda_arch=x86_64 ;;
aarch64 | arm64) goarch=arm64 lambda_arch=arm64 ;;
*) die "unsupported machine $(uname -m): Lambda runs x86_64 or arm64" ;;
esac

# wait_for DESCRIPTION COMMAND...: retry COMMAND for up to two minutes.
wait_for() {
	local what=$1
	shift
	for _ in $(seq 60); do
		if "$@" >/dev/null 2>&1; then
			return 0
		fi
		sleep 2
	done
	die "$what is not ready after 120 s; is 'docker compose up -d' running in $here?"
}

log "waiting for LocalStack at $endpoint and for Kafka"
wait_for "LocalStack" curl -fsS "$endpoint/_localstack/health"
wait_for "Kafka" "${compose[@]}" exec -T kafka \
	/opt/kafka/bin/kafka-broker-api-versions.sh --bootstrap-server kafka:19092

log "creating topic $topic"
"${compose[@]}" exec -T kafka /opt/kafka/bin/kafka-topics.sh --bootstrap-server kafka:19092 \
	--create --if-not-exists --topic "$topic" --partitions 3 --replication-factor 1 >/dev/null

# Stage the template with the binaries where its CodeUri folders point
# (lambda/relay, lambda/sweeper, lambda/setup; the lambda/ module), as `sam build` would, so that
# `cloudformation package` zips binaries rather than sources.
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
cp "$root/template.yaml" "$staging/template.yaml"
for fn in relay sweeper setup; do
	log "building lambda/$fn for linux/$goarch"
	mkdir -p "$staging/lambda/$fn"
	(cd "$root/lambda" && CGO_ENABLED=0 GOOS=linux GOARCH=$goarch go build -trimpath -tags lambda.norpc \
		-ldflags='-s -w' -o "$staging/lambda/$fn/bootstrap" "./$fn")
done

if ! "${aws[@]}" s3api head-bucket --bucket "$artifacts" >/dev/null 2>&1; then
	"${aws[@]}" s3 mb "s3://$artifacts" >/dev/null
fi
log "packaging"
"${aws[@]}" cloudformation package --template-file "$staging/template.yaml" \
	--s3-bucket "$artifacts" --output-template-file "$staging/packaged.yaml" >/dev/null

# Parameter overrides: every parameter without a default must be here
# (deploy/localstack_test.go checks these names against the template).
params=(
	"KafkaBootstrapServers=kafka:19092"
	"KafkaAuthMode=none"
	"BucketCount=$bucket_count"
	"Topics=$topic"
	"Architecture=$lambda_arch"
	"LogRetentionInDays=1"
)
log "deploying stack $stack"
"${aws[@]}" cloudformation deploy --template-file "$staging/packaged.yaml" --stack-name "$stack" \
	--capabilities CAPABILITY_IAM CAPABILITY_AUTO_EXPAND --no-fail-on-empty-changeset \
	--parameter-overrides "${params[@]}"

output() {
	"${aws[@]}" cloudformation describe-stacks --stack-name "$stack" \
		--query "Stacks[0].Outputs[?OutputKey=='$1'].OutputValue" --output text
}
messages=$(output MessagesTableName)
control=$(output ControlTableName)
relay=$(output RelayFunctionName)
sweeper=$(output SweeperFunctionName)
if [ -z "$messages" ] || [ -z "$control" ] || [ -z "$relay" ] || [ -z "$sweeper" ]; then
	die "stack $stack lacks outputs; see: ${aws[*]} cloudformation describe-stack-events --stack-name $stack"
fi

# The stack's custom resource (lambda/setup) wrote the config item with
# BucketCount; the functions refuse to start without it. Check it is there
# and says what was asked: an update to another count is refused while the
# outbox holds messages, and the stack then keeps the old one.
if ! stored=$("${aws[@]}" dynamodb get-item --table-name "$control" --consistent-read \
	--key '{"pk":{"S":"config"},"sk":{"S":"config"}}' --query 'Item.bc.N' --output text 2>&1); then
	die "reading the config item: $stored"
fi
if [ "$stored" != "$bucket_count" ]; then
	die "the config item says BucketCount=$stored, not $bucket_count; use BUCKET_COUNT=$stored, drain the outbox first, or use a new STACK_NAME"
fi

# Smoke check: one sweeper invocation runs the functions' whole init (config
# item, bucket count, Kafka connection and topic check) and one sweep.
log "invoking $sweeper once (the first invocation pulls the runtime image)"
result="$staging/sweeper.json"
function_error=$("${aws[@]}" lambda invoke --function-name "$sweeper" \
	--query FunctionError --output text "$result")
if [ "$function_error" != "None" ] && [ -n "$function_error" ]; then
	die "the sweeper failed ($function_error): $(cat "$result"); logs: ${aws[*]} logs tail /aws/lambda/$sweeper"
fi

cat <<EOF
Deployed stack $stack into LocalStack at $endpoint.
  messages table  $messages
  control table   $control
  relay           $relay
  sweeper         $sweeper
  topic           $topic (from the host: localhost:9092; from Lambda: kafka:19092)

Write with dynamo.NewWriter against those tables (endpoint $endpoint), then:
  ${compose[*]} exec kafka /opt/kafka/bin/kafka-console-consumer.sh \\
    --bootstrap-server kafka:19092 --topic $topic --from-beginning
Logs: ${aws[*]} logs tail /aws/lambda/$relay --follow
EOF
