package health_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/health"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestKumoQueueAndTableChecks(t *testing.T) {
	ctx := testenv.Context(t)
	cfg := testenv.AWSConfig(testenv.Kumo(t))
	sqsAPI, db := sqs.NewFromConfig(cfg), dynamodb.NewFromConfig(cfg)
	q, err := sqsAPI.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(testenv.UniqueName(t, "q"))})
	require.NoError(t, err)
	table := testenv.UniqueName(t, "tbl")
	require.NoError(t, state.CreateTable(ctx, db, table))

	require.NoError(t, health.QueueCheck(sqsAPI, aws.ToString(q.QueueUrl))(ctx))
	require.NoError(t, health.TableCheck(db, table)(ctx))

	missingQueue := "http://127.0.0.1:4566/000000000000/" + testenv.UniqueName(t, "missing")
	require.ErrorContains(t, health.QueueCheck(sqsAPI, missingQueue)(ctx), "queue "+missingQueue)
	missingTable := testenv.UniqueName(t, "missing")
	require.ErrorContains(t, health.TableCheck(db, missingTable)(ctx), "table "+missingTable)
}
