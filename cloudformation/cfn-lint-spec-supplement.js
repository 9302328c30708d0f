// Loaded by scripts/cfn-lint.sh (NODE_OPTIONS=--require) before the npm cfn-lint 1.9.7 CLI runs.
//
// cfn-lint 1.9.7 bundles CloudFormation resource specification 2.29.0 (2019), which predates some
// properties the template uses; without them it reports "X is not a valid property". This adds exactly
// those properties, as the current AWS CloudFormation resource specification defines them, to the
// specification object the CLI reads (a cached module, so the CLI sees the additions). Everything else is
// validated by the bundled specification as is. Add a property here only with its documentation link.
'use strict';

const spec = require('cfn-lint/lib/awsData').awsResources;

const docs = 'https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/';

const resourceProperties = {
  'AWS::DynamoDB::Table': {
    // Resource-based policies for DynamoDB tables (2024).
    ResourcePolicy: {
      Documentation: docs + 'aws-resource-dynamodb-table.html#cfn-dynamodb-table-resourcepolicy',
      Type: 'ResourcePolicy', Required: false, UpdateType: 'Mutable',
    },
  },
  'AWS::Logs::LogGroup': {
    // Log groups encrypted with a customer managed KMS key (KmsKeyArn).
    KmsKeyId: {
      Documentation: docs + 'aws-resource-logs-loggroup.html#cfn-logs-loggroup-kmskeyid',
      PrimitiveType: 'String', Required: false, UpdateType: 'Mutable',
    },
  },
  'AWS::SQS::Queue': {
    // SSE with SQS-owned keys (2021).
    SqsManagedSseEnabled: {
      Documentation: docs + 'aws-resource-sqs-queue.html#cfn-sqs-queue-sqsmanagedsseenabled',
      PrimitiveType: 'Boolean', Required: false, UpdateType: 'Mutable',
    },
  },
};

const propertyTypes = {
  'AWS::DynamoDB::Table.ResourcePolicy': {
    Documentation: docs + 'aws-properties-dynamodb-table-resourcepolicy.html',
    Properties: {
      PolicyDocument: {PrimitiveType: 'Json', Required: true, UpdateType: 'Mutable'},
    },
  },
  // ECS deployment circuit breaker (2020).
  'AWS::ECS::Service.DeploymentCircuitBreaker': {
    Documentation: docs + 'aws-properties-ecs-service-deploymentcircuitbreaker.html',
    Properties: {
      Enable: {PrimitiveType: 'Boolean', Required: true, UpdateType: 'Mutable'},
      Rollback: {PrimitiveType: 'Boolean', Required: true, UpdateType: 'Mutable'},
    },
  },
};

const propertyTypeProperties = {
  'AWS::DynamoDB::Table.SSESpecification': {
    // Tables encrypted with a customer managed KMS key (KmsKeyArn).
    KMSMasterKeyId: {
      Documentation: docs + 'aws-properties-dynamodb-table-ssespecification.html#cfn-dynamodb-table-ssespecification-kmsmasterkeyid',
      PrimitiveType: 'String', Required: false, UpdateType: 'Mutable',
    },
    SSEType: {
      Documentation: docs + 'aws-properties-dynamodb-table-ssespecification.html#cfn-dynamodb-table-ssespecification-ssetype',
      PrimitiveType: 'String', Required: false, UpdateType: 'Mutable',
    },
  },
  'AWS::CloudWatch::Alarm.MetricDataQuery': {
    // Needed by Metrics Insights queries in alarms (2020).
    Period: {
      Documentation: docs + 'aws-properties-cloudwatch-alarm-metricdataquery.html#cfn-cloudwatch-alarm-metricdataquery-period',
      PrimitiveType: 'Integer', Required: false, UpdateType: 'Mutable',
    },
  },
  'AWS::ECS::Service.DeploymentConfiguration': {
    DeploymentCircuitBreaker: {
      Documentation: docs + 'aws-properties-ecs-service-deploymentconfiguration.html#cfn-ecs-service-deploymentconfiguration-deploymentcircuitbreaker',
      Type: 'DeploymentCircuitBreaker', Required: false, UpdateType: 'Mutable',
    },
  },
};

for (const [type, props] of Object.entries(resourceProperties)) {
  Object.assign(spec.ResourceTypes[type].Properties, props);
}
Object.assign(spec.PropertyTypes, propertyTypes);
for (const [type, props] of Object.entries(propertyTypeProperties)) {
  Object.assign(spec.PropertyTypes[type].Properties, props);
}

// SSM parameter types (SubnetIdsParameter, SecurityGroupIdsParameter): CloudFormation resolves them from
// Parameter Store; a List<...> one is a list, as the bundled List<AWS::EC2::...> types are. docs +
// 'cloudformation-supplied-parameter-types.html#systems-manager-parameter-types'
const parameterTypes = require('cfn-lint/lib/awsData').awsParameterTypes;
for (const inner of ['AWS::EC2::Subnet::Id', 'AWS::EC2::SecurityGroup::Id']) {
  parameterTypes['AWS::SSM::Parameter::Value<List<' + inner + '>>'] = 'array';
}
