module github.com/patch-agent/patch-agent/tools/kumo

go 1.26.0

require github.com/sivchari/kumo v0.33.1

require (
	github.com/aws/aws-sdk-go-v2 v1.43.4 // indirect
	github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream v1.7.16 // indirect
	github.com/aws/aws-sdk-go-v2/config v1.32.17 // indirect
	github.com/aws/aws-sdk-go-v2/credentials v1.19.16 // indirect
	github.com/aws/aws-sdk-go-v2/feature/ec2/imds v1.18.23 // indirect
	github.com/aws/aws-sdk-go-v2/internal/configsources v1.4.35 // indirect
	github.com/aws/aws-sdk-go-v2/internal/endpoints/v2 v2.7.35 // indirect
	github.com/aws/aws-sdk-go-v2/internal/v4a v1.4.36 // indirect
	github.com/aws/aws-sdk-go-v2/service/acm v1.38.3 // indirect
	github.com/aws/aws-sdk-go-v2/service/amplify v1.38.16 // indirect
	github.com/aws/aws-sdk-go-v2/service/apigateway v1.39.3 // indirect
	github.com/aws/aws-sdk-go-v2/service/apigatewayv2 v1.35.2 // indirect
	github.com/aws/aws-sdk-go-v2/service/appmesh v1.35.14 // indirect
	github.com/aws/aws-sdk-go-v2/service/appsync v1.53.7 // indirect
	github.com/aws/aws-sdk-go-v2/service/athena v1.57.6 // indirect
	github.com/aws/aws-sdk-go-v2/service/backup v1.55.2 // indirect
	github.com/aws/aws-sdk-go-v2/service/cloudformation v1.76.1 // indirect
	github.com/aws/aws-sdk-go-v2/service/cloudfront v1.67.4 // indirect
	github.com/aws/aws-sdk-go-v2/service/cloudwatch v1.66.3 // indirect
	github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs v1.81.1 // indirect
	github.com/aws/aws-sdk-go-v2/service/dynamodb v1.57.3 // indirect
	github.com/aws/aws-sdk-go-v2/service/dynamodbstreams v1.36.4 // indirect
	github.com/aws/aws-sdk-go-v2/service/ec2 v1.319.1 // indirect
	github.com/aws/aws-sdk-go-v2/service/ecr v1.60.4 // indirect
	github.com/aws/aws-sdk-go-v2/service/ecs v1.90.0 // indirect
	github.com/aws/aws-sdk-go-v2/service/eventbridge v1.45.25 // indirect
	github.com/aws/aws-sdk-go-v2/service/firehose v1.46.4 // indirect
	github.com/aws/aws-sdk-go-v2/service/iam v1.58.1 // indirect
	github.com/aws/aws-sdk-go-v2/service/internal/accept-encoding v1.13.15 // indirect
	github.com/aws/aws-sdk-go-v2/service/internal/checksum v1.9.15 // indirect
	github.com/aws/aws-sdk-go-v2/service/internal/endpoint-discovery v1.11.23 // indirect
	github.com/aws/aws-sdk-go-v2/service/internal/presigned-url v1.13.35 // indirect
	github.com/aws/aws-sdk-go-v2/service/internal/s3shared v1.19.23 // indirect
	github.com/aws/aws-sdk-go-v2/service/kinesis v1.43.7 // indirect
	github.com/aws/aws-sdk-go-v2/service/kms v1.51.1 // indirect
	github.com/aws/aws-sdk-go-v2/service/lambda v1.101.2 // indirect
	github.com/aws/aws-sdk-go-v2/service/route53 v1.65.6 // indirect
	github.com/aws/aws-sdk-go-v2/service/s3 v1.100.1 // indirect
	github.com/aws/aws-sdk-go-v2/service/secretsmanager v1.44.4 // indirect
	github.com/aws/aws-sdk-go-v2/service/sesv2 v1.66.4 // indirect
	github.com/aws/aws-sdk-go-v2/service/sfn v1.45.4 // indirect
	github.com/aws/aws-sdk-go-v2/service/signin v1.0.11 // indirect
	github.com/aws/aws-sdk-go-v2/service/sns v1.42.4 // indirect
	github.com/aws/aws-sdk-go-v2/service/sqs v1.42.27 // indirect
	github.com/aws/aws-sdk-go-v2/service/ssm v1.73.4 // indirect
	github.com/aws/aws-sdk-go-v2/service/sso v1.30.17 // indirect
	github.com/aws/aws-sdk-go-v2/service/ssooidc v1.35.21 // indirect
	github.com/aws/aws-sdk-go-v2/service/sts v1.45.4 // indirect
	github.com/aws/smithy-go v1.27.6 // indirect
	github.com/cedar-policy/cedar-go v1.8.0 // indirect
	github.com/fxamacker/cbor/v2 v2.9.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	golang.org/x/crypto v0.47.0 // indirect
	golang.org/x/exp v0.0.0-20220921023135-46d9e7742f1e // indirect
	golang.org/x/sys v0.40.0 // indirect
)
