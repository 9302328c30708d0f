package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	ecstypes "github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testenv"
)

// TestMain runs the tests as testenv.Main does and removes the binary the tests built, if any.
func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	testenv.StopKumo()
	testenv.StopMoto()
	os.Exit(code)
}

const (
	group     = "web"
	cluster   = "prod"
	parameter = "/golden/ecs/ami"
	desired   = 3
	// maxSize leaves room for one instance above desired: an instance refresh launches before it terminates,
	// and the agent never raises MaxSize.
	maxSize = desired + 1
	// tasksPerInstance are started on every container instance at setup.
	tasksPerInstance = 2
	// motoHookQueue is the agent's queue: moto 5.2.1 gives every lifecycle hook the notification target
	// arn:aws:sqs:us-east-1:123456789012:my-queue whatever PutLifecycleHook says, and the agent takes as its
	// own only hooks that notify its queue or none (model.HookOwned).
	motoHookQueue = "my-queue"
	// motoWithin bounds each wait for the agent's record to reach a state, restarts included.
	motoWithin = 90 * time.Second
)

// env is one end-to-end world: moto as the account, kumo for CloudWatch, the proxy the agent talks through.
type env struct {
	t               *testing.T
	moto, kumo      string
	agentProxy      *proxy // the agent's endpoint: logs, repairs, kills
	cloudWatchProxy *proxy // the agent's CloudWatch endpoint, in front of kumo: logs only
	driverProxy     *proxy // the test's endpoint for ECS: repairs moto's task answers only
	as              *autoscaling.Client
	ec2             *ec2.Client
	ecs             *ecs.Client
	ssm             *ssm.Client
	ddb             *dynamodb.Client
	sqs             *sqs.Client
	queueURL, table string
	amiOld, amiNew  string
	templateID      string
	original        []string
	bin             string
	dir             string

	mu        sync.Mutex
	current   *agent
	starts    int
	published bool
	// exited is set when an incarnation exited without being killed.
	exited string
}

func clientConfig(endpoint string) aws.Config {
	cfg := testenv.AWSConfig(endpoint)
	cfg.Retryer = func() aws.Retryer { return retry.NewStandard() }
	return cfg
}

// built is the binary agentBinary built, once per test binary.
var built struct {
	once      sync.Once
	dir, path string
	err       error
}

// agentBinary returns $PATCH_AGENT_E2E_BIN (make e2e builds it), or builds cmd/patch-agent once into a
// temporary directory that TestMain removes.
func agentBinary(t *testing.T) string {
	if p := os.Getenv("PATCH_AGENT_E2E_BIN"); p != "" {
		return p
	}
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "patch-agent-e2e-"); built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "patch-agent")
		b, err := exec.Command("go", "build", "-o", built.path, "../../cmd/patch-agent").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("building patch-agent: %w: %s", err, b)
		}
	})
	require.NoError(t, built.err)
	return built.path
}

// newEnv builds on moto an opted-in ECS group of 3 instances (min 1, max 4) on the old AMI of its SSM
// parameter, with no lifecycle hook, a container instance and tasks on each instance, the agent's queue and
// its table.
func newEnv(t *testing.T) *env {
	e := &env{t: t, moto: testenv.Moto(t), kumo: testenv.Kumo(t), bin: agentBinary(t), dir: t.TempDir()}
	e.agentProxy, e.driverProxy, e.cloudWatchProxy = newProxy(t, e.moto), newProxy(t, e.moto), newProxy(t, e.kumo)
	cfg := clientConfig(e.moto)
	e.as, e.ec2, e.ssm, e.ddb = autoscaling.NewFromConfig(cfg), ec2.NewFromConfig(cfg), ssm.NewFromConfig(cfg), dynamodb.NewFromConfig(cfg)
	e.ecs = ecs.NewFromConfig(clientConfig(e.driverProxy.URL))
	ctx := testenv.Context(t)

	e.amiOld, e.amiNew = twoImages(t, e.ec2)
	lt, err := e.ec2.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{LaunchTemplateName: aws.String(group),
		LaunchTemplateData: &ec2types.RequestLaunchTemplateData{ImageId: aws.String(e.amiOld), InstanceType: ec2types.InstanceTypeM6iLarge}})
	require.NoError(t, err)
	e.templateID = aws.ToString(lt.LaunchTemplate.LaunchTemplateId)
	_, err = e.ecs.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String(cluster)})
	require.NoError(t, err)
	_, err = e.ecs.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String("app"),
		ContainerDefinitions: []ecstypes.ContainerDefinition{{Name: aws.String("app"), Image: aws.String("public.ecr.aws/nginx/nginx:1"),
			Cpu: 256, Memory: aws.Int32(256), Essential: aws.Bool(true)}}})
	require.NoError(t, err)
	_, err = e.ssm.PutParameter(ctx, &ssm.PutParameterInput{Name: aws.String(parameter), Value: aws.String(e.amiOld), Type: ssmtypes.ParameterTypeString})
	require.NoError(t, err)
	tags := map[string]string{model.TagEnabled: "true", model.TagPlatform: "ecs", model.TagCluster: cluster,
		model.TagParameter: parameter}
	in := &autoscaling.CreateAutoScalingGroupInput{AutoScalingGroupName: aws.String(group), MinSize: aws.Int32(1),
		MaxSize: aws.Int32(maxSize), DesiredCapacity: aws.Int32(desired), AvailabilityZones: []string{"us-east-1a", "us-east-1b", "us-east-1c"},
		LaunchTemplate: &astypes.LaunchTemplateSpecification{LaunchTemplateId: aws.String(e.templateID), Version: aws.String("$Default")}}
	for k, v := range tags {
		in.Tags = append(in.Tags, astypes.Tag{Key: aws.String(k), Value: aws.String(v), PropagateAtLaunch: aws.Bool(true),
			ResourceId: aws.String(group), ResourceType: aws.String("auto-scaling-group")})
	}
	_, err = e.as.CreateAutoScalingGroup(ctx, in)
	require.NoError(t, err)
	e.original = e.inService(ctx)
	require.Len(t, e.original, desired)
	e.registerContainerInstances(ctx)

	e.sqs = sqs.NewFromConfig(cfg)
	q, err := e.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(motoHookQueue)})
	require.NoError(t, err)
	e.queueURL = aws.ToString(q.QueueUrl)
	e.table = "patch-agent"
	require.NoError(t, state.CreateTable(ctx, e.ddb, e.table))
	return e
}

// twoImages returns two of moto's x86_64 Linux AMIs: the old and the new.
func twoImages(t *testing.T, api *ec2.Client) (string, string) {
	out, err := api.DescribeImages(context.Background(), &ec2.DescribeImagesInput{Owners: []string{"amazon"},
		Filters: []ec2types.Filter{{Name: aws.String("architecture"), Values: []string{"x86_64"}}}})
	require.NoError(t, err)
	// Two releases of one OS family, as a golden-AMI pipeline publishes them: the AMI gate (C20) refuses a
	// family change.
	byFamily := map[string][]string{}
	for _, img := range out.Images {
		if img.Platform == "" && img.State == ec2types.ImageStateAvailable {
			f := providers.DescribeOSFamily(img)
			byFamily[f] = append(byFamily[f], aws.ToString(img.ImageId))
		}
	}
	families := make([]string, 0, len(byFamily))
	for f := range byFamily {
		families = append(families, f)
	}
	sort.Strings(families)
	for _, f := range families {
		if ids := byFamily[f]; len(ids) >= 2 {
			sort.Strings(ids)
			return ids[0], ids[1]
		}
	}
	require.Fail(t, "moto ships Amazon Linux AMIs", "no two x86_64 AMIs of one family: %v", byFamily)
	return "", ""
}

func (e *env) describe(ctx context.Context) astypes.AutoScalingGroup {
	out, err := e.as.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{group}})
	require.NoError(e.t, err)
	require.Len(e.t, out.AutoScalingGroups, 1)
	return out.AutoScalingGroups[0]
}

func (e *env) inService(ctx context.Context) []string {
	var ids []string
	for _, i := range e.describe(ctx).Instances {
		if i.LifecycleState == astypes.LifecycleStateInService {
			ids = append(ids, aws.ToString(i.InstanceId))
		}
	}
	sort.Strings(ids)
	return ids
}

// registerContainerInstances plays the ECS container agent of each instance of the group: it registers the
// instance's container instance in the cluster and starts tasksPerInstance tasks on it.
func (e *env) registerContainerInstances(ctx context.Context) {
	for _, i := range e.describe(ctx).Instances {
		id := aws.ToString(i.InstanceId)
		doc, _ := json.Marshal(map[string]string{"instanceId": id, "region": testenv.Region, "availabilityZone": aws.ToString(i.AvailabilityZone)})
		reg, err := e.ecs.RegisterContainerInstance(ctx, &ecs.RegisterContainerInstanceInput{Cluster: aws.String(cluster),
			InstanceIdentityDocument: aws.String(string(doc))})
		require.NoError(e.t, err, "registering the container instance of %s", id)
		for range tasksPerInstance {
			_, err := e.ecs.StartTask(ctx, &ecs.StartTaskInput{Cluster: aws.String(cluster), TaskDefinition: aws.String("app"),
				ContainerInstances: []string{aws.ToString(reg.ContainerInstance.ContainerInstanceArn)}})
			require.NoError(e.t, err, "starting a task on %s", id)
		}
	}
}

// putHooks puts the agent's launching and terminating lifecycle hooks on the group, as docs/deploy.md does
// (moto gives them the notification target motoHookQueue, the agent's queue).
func (e *env) putHooks(ctx context.Context) {
	for _, h := range []struct{ name, transition, result string }{
		{"patch-agent-launch", "autoscaling:EC2_INSTANCE_LAUNCHING", "ABANDON"},
		{"patch-agent-drain", "autoscaling:EC2_INSTANCE_TERMINATING", "CONTINUE"},
	} {
		_, err := e.as.PutLifecycleHook(ctx, &autoscaling.PutLifecycleHookInput{AutoScalingGroupName: aws.String(group),
			LifecycleHookName: aws.String(h.name), LifecycleTransition: aws.String(h.transition), HeartbeatTimeout: aws.Int32(300),
			DefaultResult: aws.String(h.result)})
		require.NoError(e.t, err, "putting hook %s", h.name)
	}
	out, err := e.as.DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String(group)})
	require.NoError(e.t, err)
	require.Len(e.t, out.LifecycleHooks, 2, "moto serves PutLifecycleHook and DescribeLifecycleHooks")
}

// agent is one incarnation of `patch-agent run`.
type agent struct {
	cmd    *exec.Cmd
	exited chan struct{}
	log    string
}

// agentEnv is the environment of the agent's processes: every service on moto through the agent's proxy,
// CloudWatch on kumo.
func (e *env) agentEnv() []string {
	return append(os.Environ(), "AWS_ENDPOINT_URL="+e.agentProxy.URL,
		// CloudWatch stays on kumo: moto does not serve the SDK's default CloudWatch protocol.
		"AWS_ENDPOINT_URL_CLOUDWATCH="+e.cloudWatchProxy.URL, "AWS_DISABLE_REQUEST_COMPRESSION=true",
		"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null")
}

func (e *env) startAgent(n int) *agent {
	log := filepath.Join(e.dir, fmt.Sprintf("agent-%d.log", n))
	f, err := os.Create(log)
	require.NoError(e.t, err)
	defer f.Close()
	cmd := exec.Command(e.bin, "run", "--region", testenv.Region, "--queue-url", e.queueURL, "--table", e.table,
		"--reconcile-interval", "500ms", "--poll-interval", "1m", "--metrics-interval", "10s", "--health-addr", "",
		"--owner-id", "e2e-agent", "--log-level", "debug",
		// The golden parameter names moto's Amazon AMIs: the AMI gate (C20) accepts Amazon's only when told to.
		"--allowed-ami-owners", "amazon")
	cmd.Env = e.agentEnv()
	cmd.Stdout, cmd.Stderr = f, f
	require.NoError(e.t, cmd.Start())
	a := &agent{cmd: cmd, exited: make(chan struct{}), log: log}
	go func() { _ = cmd.Wait(); close(a.exited) }()
	return a
}

func (a *agent) kill() {
	_ = a.cmd.Process.Kill()
	<-a.exited
}

func (e *env) rollout(ctx context.Context) state.Rollout {
	r, err := state.NewDynamoDB(e.ddb, e.table).GetRollout(ctx, group)
	if err != nil {
		return state.Rollout{}
	}
	return r
}

// supervise runs the agent until ctx ends, restarting each incarnation the proxy killed; an incarnation that
// exits on its own is recorded in e.exited and not restarted. It publishes the new AMI once the agent has read
// the old one. When ctx ends it stops the running incarnation with SIGINT (the agent's shutdown) and returns.
func (e *env) supervise(ctx context.Context) {
	e.agentProxy.mu.Lock()
	e.agentProxy.kill = func() {
		e.mu.Lock()
		a := e.current
		e.mu.Unlock()
		e.agentProxy.mu.Lock()
		e.agentProxy.killedPID = a.cmd.Process.Pid
		e.agentProxy.mu.Unlock()
		a.kill()
	}
	e.agentProxy.mu.Unlock()
	for {
		e.mu.Lock()
		a := e.startAgent(e.starts)
		e.starts++
		e.current = a
		e.mu.Unlock()
		for done := false; !done; {
			select {
			case <-ctx.Done():
				_ = a.cmd.Process.Signal(os.Interrupt)
				select {
				case <-a.exited:
				case <-time.After(10 * time.Second):
					a.kill()
				}
				return
			case <-a.exited:
				done = true
			case <-time.After(200 * time.Millisecond):
				e.publishOnce(ctx)
			}
		}
		e.agentProxy.mu.Lock()
		byProxy := e.agentProxy.killedPID == a.cmd.Process.Pid
		e.agentProxy.mu.Unlock()
		if !byProxy {
			e.mu.Lock()
			e.exited = fmt.Sprintf("agent exited on its own (%s): %s", a.cmd.ProcessState, tailFile(a.log))
			e.mu.Unlock()
			return
		}
	}
}

// publishOnce publishes the new AMI, as a pipeline would, once the agent has read the parameter: the parameter,
// and the Parameter Store Change event EventBridge delivers to the agent's queue (the stack's rule).
func (e *env) publishOnce(ctx context.Context) {
	if e.published || len(e.agentProxy.calls("GetParameters")) == 0 {
		return
	}
	_, err := e.ssm.PutParameter(ctx, &ssm.PutParameterInput{Name: aws.String(parameter), Value: aws.String(e.amiNew),
		Type: ssmtypes.ParameterTypeString, Overwrite: aws.Bool(true)})
	if err != nil {
		e.t.Errorf("publishing the new AMI: %v", err)
		return
	}
	event := fmt.Sprintf(`{"version":"0","id":"9547ef2d-3b7e-4057-b6cb-5fdf09ee7c8f","detail-type":"Parameter Store Change",`+
		`"source":"aws.ssm","account":"123456789012","time":%q,"region":%q,"resources":["arn:aws:ssm:%s:123456789012:parameter%s"],`+
		`"detail":{"operation":"Update","name":%q,"type":"String"}}`,
		time.Now().UTC().Format(time.RFC3339), testenv.Region, testenv.Region, parameter, parameter)
	if _, err = e.sqs.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(e.queueURL), MessageBody: aws.String(event)}); err != nil {
		e.t.Errorf("sending the Parameter Store Change event: %v", err)
	}
	e.published = true
}

// waitFor waits until the agent's record satisfies ok, failing the test after motoWithin or when an
// incarnation exited on its own.
func (e *env) waitFor(what string, ok func(r state.Rollout) bool) state.Rollout {
	ctx := context.Background()
	deadline := time.Now().Add(motoWithin)
	for {
		r := e.rollout(ctx)
		if ok(r) {
			return r
		}
		e.mu.Lock()
		exited, last := e.exited, e.starts-1
		e.mu.Unlock()
		if exited != "" {
			e.t.Fatal(exited)
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the agent's record not %s within %s (phase %s, target %s, reason %q); last agent log: %s", what, motoWithin,
				r.Phase, r.TargetImageID, r.Reason, tailFile(filepath.Join(e.dir, fmt.Sprintf("agent-%d.log", last))))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// status runs `patch-agent status GROUP -o json` against the agent's table on moto and returns the group's row.
func (e *env) status() operator.StatusRow {
	cmd := exec.Command(e.bin, "status", group, "--table", e.table, "--region", testenv.Region, "-o", "json")
	cmd.Env = append(os.Environ(), "AWS_ENDPOINT_URL="+e.moto, "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
		"AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(e.t, err, "patch-agent status: %s", stderr.String())
	var doc operator.StatusDocument
	require.NoError(e.t, json.Unmarshal(out, &doc), "patch-agent status -o json: %s", out)
	require.Len(e.t, doc.Groups, 1, "patch-agent status -o json: %s", out)
	return doc.Groups[0]
}

func tailFile(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return path + ":\n" + strings.Join(lines, "\n")
}

// applied returns the proxy's log of operation's calls moto answered with 200.
func (p *proxy) applied(operation string) []call {
	var out []call
	for _, c := range p.calls(operation) {
		if c.Status == 200 {
			out = append(out, c)
		}
	}
	return out
}

// The real binary against moto over the wire, up to where moto ends: moto 5.2.1 serves no instance refresh
// (no StartInstanceRefresh, DescribeInstanceRefreshes or CompleteLifecycleAction; docs/testing.md), so the
// rollout itself runs on the served simulation (served_test.go). Here the agent discovers the opted-in group,
// reads its SSM parameter, takes the new AMI from the Parameter Store Change event on its queue and passes the
// AMI gate; without lifecycle hooks it waits with a status naming both missing hooks and makes no AWS write;
// with both hooks put (moto serves PutLifecycleHook and DescribeLifecycleHooks) it creates one launch template
// version with the new AMI and records the refresh's intent, and moto's refusal of the instance refresh shows
// as a retried error in `patch-agent status -o json`. The agent is SIGKILLed right after moto applied its
// CreateLaunchTemplateVersion and right after the DynamoDB write of the intent, before either answer reached
// it: no effect is repeated (one new version), and nothing of the group's capacity, limits, instances or
// container instances is ever written.
func TestE2EOnMotoPreparesTheRefreshMotoCannotStart(t *testing.T) {
	e := newEnv(t)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { e.supervise(ctx) })
	defer wg.Wait()
	defer stop()
	start := time.Now()

	// No hooks: the group waits, its reason naming each missing hook with the command that adds it.
	r := e.waitFor("Waiting for the hooks on the new AMI", func(r state.Rollout) bool {
		return r.TargetImageID == e.amiNew && r.Phase == state.PhaseWaiting && strings.Contains(r.Reason, "lifecycle hook")
	})
	t.Logf("waiting for the hooks after %s: %s", time.Since(start).Round(100*time.Millisecond), r.Reason)
	row := e.status()
	require.Equal(t, state.PhaseWaiting, row.Phase)
	require.Equal(t, e.amiNew, row.TargetImageID)
	require.Equal(t, desired, row.Instances)
	require.Zero(t, row.OnTarget)
	require.Contains(t, row.Reason, "no launching lifecycle hook of the agent's")
	require.Contains(t, row.Reason, "no terminating lifecycle hook of the agent's")
	require.Contains(t, row.Reason, "aws autoscaling put-lifecycle-hook --auto-scaling-group-name "+group+" --lifecycle-hook-name patch-agent-launch")
	require.Empty(t, e.agentProxy.calls("CreateLaunchTemplateVersion"), "no launch template version while the hooks are missing")

	// Both hooks: the agent prepares the refresh, killed right after its two effects.
	e.agentProxy.mu.Lock()
	e.agentProxy.killAt["CreateLaunchTemplateVersion"] = 1
	e.agentProxy.killIf = func(c call, body []byte) bool {
		return (c.Operation == "PutItem" || c.Operation == "TransactWriteItems") && bytes.Contains(body, []byte(string(state.StepInstanceRefresh)))
	}
	e.agentProxy.mu.Unlock()
	hooked := time.Now()
	e.putHooks(context.Background())
	r = e.waitFor("retrying the instance refresh", func(r state.Rollout) bool {
		return r.Phase == state.PhaseReplacing && strings.HasPrefix(r.Reason, "retrying after an error: ")
	})
	t.Logf("retrying after %s from the hooks: %s", time.Since(hooked).Round(100*time.Millisecond), r.Reason)
	// The error stays and is retried: wait for the agent's next attempt after its backoff.
	attempts := len(e.agentProxy.calls("DescribeInstanceRefreshes"))
	require.Eventually(t, func() bool { return len(e.agentProxy.calls("DescribeInstanceRefreshes")) > attempts }, 30*time.Second, 200*time.Millisecond,
		"the agent tries the instance refresh again")

	row = e.status()
	require.Equal(t, state.PhaseReplacing, row.Phase)
	require.Equal(t, state.StepInstanceRefresh, row.Step)
	require.Equal(t, e.amiNew, row.TargetImageID)
	require.Zero(t, row.OnTarget)
	require.True(t, strings.HasPrefix(row.Reason, "retrying after an error: "), row.Reason)
	// Before it starts a refresh the agent looks for one of its own whose start answer was lost: moto refuses
	// that look (HTTP 500, no handler), and the reason names the call.
	require.Contains(t, row.Reason, "DescribeInstanceRefreshes", "the reason names the instance refresh call moto refuses")
	t.Logf("status: phase %s step %s reason %q", row.Phase, row.Step, row.Reason)

	stop()
	wg.Wait()
	e.mu.Lock()
	starts, exited := e.starts, e.exited
	e.mu.Unlock()
	require.Empty(t, exited)
	t.Logf("done in %s with %d agent starts", time.Since(start).Round(100*time.Millisecond), starts)
	e.checkKills()
	e.checkOnMoto()
}

// checkKills asserts that both kills hit and the agent was started once more for each.
func (e *env) checkKills() {
	t := e.t
	var killed []string
	e.agentProxy.mu.Lock()
	for _, c := range e.agentProxy.log {
		if c.Killed {
			killed = append(killed, c.Operation)
		}
	}
	left, pending := len(e.agentProxy.killAt), e.agentProxy.killIf != nil
	e.agentProxy.mu.Unlock()
	t.Logf("killed right after: %v", killed)
	require.Zero(t, left, "the kill after CreateLaunchTemplateVersion hit")
	require.False(t, pending, "the kill after the write of the refresh's intent hit")
	require.Len(t, killed, 2)
	require.Equal(t, 3, e.starts)
}

// checkOnMoto asserts from moto's state and the proxy's log what the agent did and did not do on moto: one
// launch template version with the new AMI, created once, the template's default version and the group's
// reference to it unchanged; instance refresh refused by moto; no write of the group's capacity, limits,
// instances, lifecycle actions or container instances.
func (e *env) checkOnMoto() {
	t, ctx := e.t, context.Background()
	p := e.agentProxy
	ops := map[string]bool{}
	for _, c := range p.calls("") {
		ops[c.Service+":"+c.Operation] = true
	}
	for _, c := range e.cloudWatchProxy.calls("") {
		ops[c.Service+":"+c.Operation] = true
	}
	t.Logf("operations called: %s", strings.Join(slices.Sorted(maps.Keys(ops)), " "))

	versions, err := e.ec2.DescribeLaunchTemplateVersions(ctx, &ec2.DescribeLaunchTemplateVersionsInput{LaunchTemplateId: aws.String(e.templateID)})
	require.NoError(t, err)
	var seen []string
	for _, v := range versions.LaunchTemplateVersions {
		seen = append(seen, fmt.Sprintf("%d:%s", aws.ToInt64(v.VersionNumber), aws.ToString(v.LaunchTemplateData.ImageId)))
	}
	require.Len(t, seen, 2, "one launch template version created, never a second: %v", seen)
	for _, v := range versions.LaunchTemplateVersions {
		image := e.amiOld
		if aws.ToInt64(v.VersionNumber) == 2 {
			image = e.amiNew
		}
		require.Equal(t, image, aws.ToString(v.LaunchTemplateData.ImageId), "version %d", aws.ToInt64(v.VersionNumber))
		require.Equal(t, aws.ToInt64(v.VersionNumber) == 1, aws.ToBool(v.DefaultVersion), "the template's default version stays 1")
	}
	require.Len(t, p.applied("CreateLaunchTemplateVersion"), 1, "CreateLaunchTemplateVersion applied once, its lost answer not repeated")

	g := e.describe(ctx)
	require.Equal(t, "$Default", aws.ToString(g.LaunchTemplate.Version), "the group's reference stays: the refresh's desired configuration names the version")
	require.Equal(t, int32(desired), aws.ToInt32(g.DesiredCapacity))
	require.Equal(t, int32(maxSize), aws.ToInt32(g.MaxSize))
	require.Equal(t, int32(1), aws.ToInt32(g.MinSize))
	require.Equal(t, e.original, e.inService(ctx), "the group's instances are the original ones, all InService")
	require.Len(t, g.Instances, desired)
	out, err := e.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: e.original})
	require.NoError(t, err)
	for _, res := range out.Reservations {
		for _, i := range res.Instances {
			require.Equal(t, ec2types.InstanceStateNameRunning, i.State.Name, "instance %s", aws.ToString(i.InstanceId))
			require.Equal(t, e.amiOld, aws.ToString(i.ImageId), "instance %s", aws.ToString(i.InstanceId))
		}
	}

	// moto has no instance refresh: every call of it was refused, and none reached StartInstanceRefresh's effect.
	refreshCalls := append(p.calls("DescribeInstanceRefreshes"), p.calls("StartInstanceRefresh")...)
	require.NotEmpty(t, refreshCalls, "the agent asked moto for the instance refresh")
	for _, c := range refreshCalls {
		require.NotEqual(t, 200, c.Status, "moto 5.2.1 serves no %s", c.Operation)
	}
	for _, op := range []string{"SetDesiredCapacity", "TerminateInstanceInAutoScalingGroup", "SetInstanceProtection", "CompleteLifecycleAction",
		"RecordLifecycleActionHeartbeat", "UpdateContainerInstancesState", "CancelInstanceRefresh", "RollbackInstanceRefresh", "DetachInstances"} {
		require.Empty(t, p.calls(op), "no %s on moto", op)
	}
	for _, c := range p.calls("UpdateAutoScalingGroup") {
		for _, field := range []string{"DesiredCapacity", "MaxSize", "MinSize"} {
			require.Empty(t, c.Form.Get(field), "UpdateAutoScalingGroup sets %s: %v", field, c.Form)
		}
	}

	for _, op := range []string{"ReceiveMessage", "DeleteMessage", "GetParameters", "PutEvents", "DescribeAutoScalingGroups", "DescribeLifecycleHooks",
		"DescribeLaunchTemplateVersions", "DescribeImages"} {
		calls := p.calls(op)
		require.NotEmpty(t, calls, op)
		for _, c := range calls {
			require.Equal(t, 200, c.Status, op)
		}
	}
	// The metrics publisher flushes on shutdown (SIGINT): CloudWatch went to kumo and was accepted.
	metrics := e.cloudWatchProxy.calls("PutMetricData")
	require.NotEmpty(t, metrics, "metrics published to CloudWatch on kumo")
	for _, c := range metrics {
		require.Equal(t, 200, c.Status)
	}
}
