module github.com/dynakafka/outbox/local/schedule

go 1.26.0

require (
	github.com/aws/aws-lambda-go v1.55.1
	github.com/google/uuid v1.6.0
)
