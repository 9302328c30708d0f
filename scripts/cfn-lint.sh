#!/usr/bin/env bash
# Lints cloudformation/patch-agent.yaml offline with the pinned npm cfn-lint (package.json devDependencies,
# installed into ./node_modules by `npm ci`). Exits non-zero on any critical finding or warning.
#
# The template is validated once per configuration below, because its conditions (AMI parameter names or
# prefix, lifecycle route, alarm topic) switch resources on and off; each run resolves them with those values.
#
# cfn-lint 1.9.7 bundles the CloudFormation resource specification 2.29.0 (2019):
# cloudformation/cfn-lint-spec-supplement.js adds the few newer properties the template uses (loaded with
# NODE_OPTIONS=--require before the CLI). It also rejects an empty CommaDelimitedList value, which
# CloudFormation accepts, so every configuration names at least one AMI parameter and one lifecycle hook
# (LifecycleHookNames); the goformation checks in internal/cfntest cover the configurations without names. With PermissionsBoundaryName or KmsKeyArn set,
# cfn-lint 1.9.7 stops resolving the template at the first Fn::If of those conditions and reports every later
# intrinsic function as "not supported here" (seen on every property, valid or not): those two options are
# checked by internal/cfntest (goformation) only.
#
# Without an argument it also lints cloudformation/operator-role.yaml (the operator role of the member
# accounts) in its configurations below.
#
# Called by internal/cfntest (go test) and usable by hand: scripts/cfn-lint.sh [template]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
template=${1:-cloudformation/patch-agent.yaml}

if [ ! -x node_modules/.bin/cfn-lint ]; then
  echo "cfn-lint is not installed: run npm ci (at the repository root)" >&2
  exit 2
fi

roles='ecsInstanceRole\,eks-nodes'
ops='patch-agent-operator\,AWSReservedSSO_PlatformAdmin_*'
configurations=(
  # everything on: names and prefix, lifecycle actions by EventBridge and by queue target, alarm topic, HA
  "AgentImage=123456789012.dkr.ecr.us-east-1.amazonaws.com/patch-agent:v1,AMIParameterNames=/golden-ami/ecs/al2023\,MyExampleParameter\,MyGoldenAMI,AMIParameterPrefix=/golden-ami/,LifecycleHookRoute=Both,LifecycleHookNames=patch-agent-drain\,patch-agent-launch,AlarmTopicArn=arn:aws:sns:us-east-1:123456789012:ops,DesiredCount=2,EcsClusterNames=prod\,staging-*,InstanceRoleNames=$roles,OperatorRoleNames=$ops"
  # the defaults: lifecycle actions by EventBridge, no prefix, no alarm topic, one replica
  "AgentImage=210987654321.dkr.ecr.eu-west-1.amazonaws.com/platform/patch-agent@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef,AMIParameterNames=MyGoldenAMI,LifecycleHookNames=patch-agent-drain,EcsClusterNames=prod,InstanceRoleNames=$roles,OperatorRoleNames=$ops"
  # hooks with the queue as notification target, prefix only besides one name
  "AgentImage=123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn/patch-agent:v1.2.3,AMIParameterNames=MyGoldenAMI,AMIParameterPrefix=/golden-ami/,LifecycleHookRoute=QueueTarget,LifecycleHookNames=patch-agent-drain,EcsClusterNames=prod,InstanceRoleNames=$roles,OperatorRoleNames=$ops"
)

# The agent stack's settings (AMI-factory owner, timeouts, budget, wake-up events, deployment name) in the first.
configurations[0]="${configurations[0]},AllowedAMIOwners=210987654321\,amazon,HealthTimeout=20m,DrainTimeout=1h,ClusterBudget=2,WakeUpEvents=false,DeploymentName=patch-agent-blue"
runs=()
for params in "${configurations[@]}"; do runs+=("$template|$params"); done
if [ "$#" -eq 0 ]; then
  # operator-role.yaml: one trusted role (an empty list is refused by this cfn-lint, see above: internal/cfntest
  # checks it), and every option (external id, trusted roles, role name, the agent stack's key)
  runs+=("cloudformation/operator-role.yaml|TrustedAccountId=123456789012,TrustedRoleNames=platform-operator")
  runs+=("cloudformation/operator-role.yaml|TrustedAccountId=123456789012,ExternalId=patch-agent-7f3a,TrustedRoleNames=platform-operator\,AWSReservedSSO_PlatformAdmin_*,RoleName=ops-patch-agent,KmsKeyArn=arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab")
fi

export NODE_OPTIONS="--require $root/cloudformation/cfn-lint-spec-supplement.js${NODE_OPTIONS:+ $NODE_OPTIONS}"
export FORCE_COLOR=0
status=0
for run in "${runs[@]}"; do
  file=${run%%|*}
  params=${run#*|}
  echo "== cfn-lint validate $file --parameters ${params//\\,/;}"
  set +e
  out=$(npx --no cfn-lint validate "$file" --parameters "$params" 2>&1)
  rc=$?
  set -e
  out=$(printf '%s\n' "$out" | sed 's/\x1b\[[0-9;]*m//g')
  printf '%s\n' "$out"
  if [ "$rc" -ne 0 ] || ! printf '%s\n' "$out" | grep -qx '0 warn' || ! printf '%s\n' "$out" | grep -qx '0 crit'; then
    status=1
  fi
done
exit "$status"
