package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
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

	"github.com/patch-agent/patch-agent/internal/lifecycle"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	group     = "web"
	cluster   = "prod"
	parameter = "/golden/ecs/ami"
	// desired is the group's desired capacity; max equals it, so every surge raises max first (C10).
	desired = 3
	// tasksPerInstance are started on every container instance by the world driver.
	tasksPerInstance = 2
	// rolloutWithin bounds one whole rollout, restarts included.
	rolloutWithin = 3 * time.Minute
)

// env is one end-to-end world: moto as the account, kumo for CloudWatch, the proxy the agent talks through.
type env struct {
	t                *testing.T
	moto, kumo       string
	agentProxy       *proxy // the agent's endpoint: logs, repairs, kills
	cloudWatchProxy  *proxy // the agent's CloudWatch endpoint, in front of kumo: logs only
	driverProxy      *proxy // the world driver's endpoint for ECS: repairs only
	as               *autoscaling.Client
	ec2              *ec2.Client
	ecs              *ecs.Client
	ssm              *ssm.Client
	ddb              *dynamodb.Client
	sqs              *sqs.Client
	queueURL, table  string
	amiOld, amiNew   string
	templateID       string
	original         []string
	bin              string
	dir              string
	minHealthyActive int // the fewest InService instances with an ACTIVE container instance the driver saw
	seen             map[string]bool
	randomKills      int // incarnations killed at a seeded random moment
	mu               sync.Mutex
}

func clientConfig(endpoint string) aws.Config {
	cfg := testenv.AWSConfig(endpoint)
	cfg.Retryer = func() aws.Retryer { return retry.NewStandard() }
	return cfg
}

// agentBinary returns $PATCH_AGENT_E2E_BIN (make e2e builds it), or builds cmd/patch-agent into a temporary
// directory.
func agentBinary(t *testing.T) string {
	if p := os.Getenv("PATCH_AGENT_E2E_BIN"); p != "" {
		return p
	}
	out := filepath.Join(t.TempDir(), "patch-agent")
	cmd := exec.Command("go", "build", "-o", out, "../../cmd/patch-agent")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "building patch-agent: %s", b)
	return out
}

func newEnv(t *testing.T) *env {
	e := &env{t: t, moto: testenv.Moto(t), kumo: testenv.Kumo(t), bin: agentBinary(t), dir: t.TempDir(),
		minHealthyActive: 1 << 30, seen: map[string]bool{}}
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
	// moto serves no instance refresh: the group is rolled by the surge, by its tag (a plain group's default is
	// instance refresh).
	tags := map[string]string{lifecycle.TagEnabled: "true", lifecycle.TagPlatform: "ecs", lifecycle.TagCluster: cluster,
		lifecycle.TagParameter: parameter, lifecycle.TagStrategy: lifecycle.StrategySurge}
	in := &autoscaling.CreateAutoScalingGroupInput{AutoScalingGroupName: aws.String(group), MinSize: aws.Int32(1),
		MaxSize: aws.Int32(desired), DesiredCapacity: aws.Int32(desired), AvailabilityZones: []string{"us-east-1a", "us-east-1b", "us-east-1c"},
		LaunchTemplate: &astypes.LaunchTemplateSpecification{LaunchTemplateId: aws.String(e.templateID), Version: aws.String("$Default")}}
	for k, v := range tags {
		in.Tags = append(in.Tags, astypes.Tag{Key: aws.String(k), Value: aws.String(v), PropagateAtLaunch: aws.Bool(true),
			ResourceId: aws.String(group), ResourceType: aws.String("auto-scaling-group")})
	}
	_, err = e.as.CreateAutoScalingGroup(ctx, in)
	require.NoError(t, err)
	e.original = e.inService(ctx)
	require.Len(t, e.original, desired)

	e.sqs = sqs.NewFromConfig(cfg)
	q, err := e.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("patch-agent")})
	require.NoError(t, err)
	e.queueURL = aws.ToString(q.QueueUrl)
	e.table = "patch-agent"
	require.NoError(t, state.CreateTable(ctx, e.ddb, e.table))

	e.agentProxy.inspect = e.inspect
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
			f := lifecycle.DescribeOSFamily(img)
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

// containerInstances returns the cluster's container instances by EC2 instance id.
func (e *env) containerInstances(ctx context.Context) (map[string]ecstypes.ContainerInstance, error) {
	list, err := e.ecs.ListContainerInstances(ctx, &ecs.ListContainerInstancesInput{Cluster: aws.String(cluster)})
	if err != nil || len(list.ContainerInstanceArns) == 0 {
		return map[string]ecstypes.ContainerInstance{}, err
	}
	out, err := e.ecs.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String(cluster),
		ContainerInstances: list.ContainerInstanceArns})
	if err != nil {
		return nil, err
	}
	m := map[string]ecstypes.ContainerInstance{}
	for _, ci := range out.ContainerInstances {
		m[aws.ToString(ci.Ec2InstanceId)] = ci
	}
	return m, nil
}

func (e *env) runningTasks(ctx context.Context, ciARN string) ([]string, error) {
	out, err := e.ecs.ListTasks(ctx, &ecs.ListTasksInput{Cluster: aws.String(cluster), ContainerInstance: aws.String(ciARN),
		DesiredStatus: ecstypes.DesiredStatusRunning})
	if err != nil {
		return nil, err
	}
	return out.TaskArns, nil
}

// group returns the group as moto describes it (from any goroutine).
func (e *env) group(ctx context.Context) (astypes.AutoScalingGroup, error) {
	out, err := e.as.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{group}})
	if err != nil {
		return astypes.AutoScalingGroup{}, err
	}
	if len(out.AutoScalingGroups) != 1 {
		return astypes.AutoScalingGroup{}, fmt.Errorf("group %s: %d groups described", group, len(out.AutoScalingGroups))
	}
	return out.AutoScalingGroups[0], nil
}

// inspect records, before a mutating call of the agent reaches moto, what moto says of its subject: the
// desired capacity before a SetDesiredCapacity, and the lifecycle state, container instance status and running
// tasks of the instance a TerminateInstanceInAutoScalingGroup names.
func (e *env) inspect(c *call) {
	ctx := context.Background()
	g, err := e.group(ctx)
	if err != nil {
		c.Before = "error: " + err.Error()
		return
	}
	switch c.Operation {
	case "SetDesiredCapacity", "UpdateAutoScalingGroup":
		c.Before = strconv.Itoa(int(aws.ToInt32(g.DesiredCapacity)))
	case "TerminateInstanceInAutoScalingGroup":
		id := c.Form.Get("InstanceId")
		lifecycleState := "gone"
		for _, i := range g.Instances {
			if aws.ToString(i.InstanceId) == id {
				lifecycleState = string(i.LifecycleState)
			}
		}
		cis, err := e.containerInstances(ctx)
		if err != nil {
			c.Before = "error: " + err.Error()
			return
		}
		status, tasks := "none", 0
		if ci, ok := cis[id]; ok {
			arns, err := e.runningTasks(ctx, aws.ToString(ci.ContainerInstanceArn))
			if err != nil {
				c.Before = "error: " + err.Error()
				return
			}
			status, tasks = aws.ToString(ci.Status), len(arns)
		}
		c.Before = fmt.Sprintf("%s %s tasks=%d", lifecycleState, status, tasks)
	}
}

// drive plays the ECS container agent until ctx ends: every 100 ms it registers a container instance for each
// new InService instance and starts its tasks, stops the tasks of DRAINING container instances (a real agent
// reports them STOPPED once ECS stops them), deregisters the container instances of instances that left the
// group, and records the fewest in-service instances with an ACTIVE container instance.
func (e *env) drive(ctx context.Context) {
	registered := map[string]bool{}
	for ctx.Err() == nil {
		if err := e.driveOnce(ctx, registered); err != nil && ctx.Err() == nil {
			e.t.Errorf("world driver: %v", err)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (e *env) driveOnce(ctx context.Context, registered map[string]bool) error {
	g, err := e.group(ctx)
	if err != nil {
		return err
	}
	live := map[string]bool{}
	for _, i := range g.Instances {
		id := aws.ToString(i.InstanceId)
		live[id] = true
		e.mu.Lock()
		e.seen[id] = true
		e.mu.Unlock()
		if registered[id] || i.LifecycleState != astypes.LifecycleStateInService {
			continue
		}
		doc, _ := json.Marshal(map[string]string{"instanceId": id, "region": testenv.Region, "availabilityZone": aws.ToString(i.AvailabilityZone)})
		reg, err := e.ecs.RegisterContainerInstance(ctx, &ecs.RegisterContainerInstanceInput{Cluster: aws.String(cluster),
			InstanceIdentityDocument: aws.String(string(doc))})
		if err != nil {
			return fmt.Errorf("registering the container instance of %s: %w", id, err)
		}
		for range tasksPerInstance {
			if _, err := e.ecs.StartTask(ctx, &ecs.StartTaskInput{Cluster: aws.String(cluster), TaskDefinition: aws.String("app"),
				ContainerInstances: []string{aws.ToString(reg.ContainerInstance.ContainerInstanceArn)}}); err != nil {
				return fmt.Errorf("starting a task on %s: %w", id, err)
			}
		}
		registered[id] = true
	}
	cis, err := e.containerInstances(ctx)
	if err != nil {
		return err
	}
	active := 0
	for id, ci := range cis {
		arn := aws.ToString(ci.ContainerInstanceArn)
		switch {
		case !live[id]:
			if _, err := e.ecs.DeregisterContainerInstance(ctx, &ecs.DeregisterContainerInstanceInput{Cluster: aws.String(cluster),
				ContainerInstance: aws.String(arn), Force: aws.Bool(true)}); err != nil {
				return fmt.Errorf("deregistering the container instance of %s: %w", id, err)
			}
		case aws.ToString(ci.Status) == "DRAINING":
			tasks, err := e.runningTasks(ctx, arn)
			if err != nil {
				return err
			}
			for _, task := range tasks {
				if _, err := e.ecs.StopTask(ctx, &ecs.StopTaskInput{Cluster: aws.String(cluster), Task: aws.String(task),
					Reason: aws.String("container instance DRAINING")}); err != nil {
					return fmt.Errorf("stopping task %s: %w", task, err)
				}
			}
		case aws.ToString(ci.Status) == "ACTIVE":
			active++
		}
	}
	e.mu.Lock()
	if len(cis) > 0 && active < e.minHealthyActive {
		e.minHealthyActive = active
	}
	e.mu.Unlock()
	return nil
}

// agent is one incarnation of `patch-agent run`.
type agent struct {
	cmd    *exec.Cmd
	exited chan struct{}
	log    string
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
	cmd.Env = append(os.Environ(), "AWS_ENDPOINT_URL="+e.agentProxy.URL,
		// CloudWatch stays on kumo: moto does not serve the SDK's default CloudWatch protocol.
		"AWS_ENDPOINT_URL_CLOUDWATCH="+e.cloudWatchProxy.URL, "AWS_DISABLE_REQUEST_COMPRESSION=true",
		"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null")
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

// roll runs the agent until the rollout is Completed, restarting it whenever it dies. randomKills incarnations
// are killed at a seeded random moment. It returns how many times the agent was started.
func (e *env) roll(randomKills int, seed uint64) (starts int) {
	t := e.t
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { e.drive(ctx) })
	defer wg.Wait()
	defer cancel()

	rng := rand.New(rand.NewPCG(seed, 19))
	var mu sync.Mutex
	var current *agent
	e.agentProxy.mu.Lock()
	e.agentProxy.kill = func() {
		mu.Lock()
		a := current
		mu.Unlock()
		e.agentProxy.mu.Lock()
		e.agentProxy.killedPID = a.cmd.Process.Pid
		e.agentProxy.mu.Unlock()
		a.kill()
	}
	e.agentProxy.mu.Unlock()

	changed := false
	deadline := time.Now().Add(rolloutWithin)
	for time.Now().Before(deadline) {
		a := e.startAgent(starts)
		starts++
		mu.Lock()
		current = a
		mu.Unlock()
		var random <-chan time.Time
		if starts <= randomKills {
			random = time.After(time.Duration(300+rng.IntN(2700)) * time.Millisecond)
		}
		killed := false
		for done := false; !done; {
			select {
			case <-a.exited:
				done = true
			case <-random:
				a.kill()
				e.randomKills++
				killed, done = true, true
			case <-time.After(200 * time.Millisecond):
				if !changed && len(e.agentProxy.calls("GetParameters")) > 0 {
					// The agent has seen the old AMI: publish the new one, as a pipeline would.
					// EventBridge delivers its Parameter Store Change event to the agent's queue (the stack's rule).
					_, err := e.ssm.PutParameter(ctx, &ssm.PutParameterInput{Name: aws.String(parameter), Value: aws.String(e.amiNew),
						Type: ssmtypes.ParameterTypeString, Overwrite: aws.Bool(true)})
					require.NoError(t, err)
					event := fmt.Sprintf(`{"version":"0","id":"9547ef2d-3b7e-4057-b6cb-5fdf09ee7c8f","detail-type":"Parameter Store Change",`+
						`"source":"aws.ssm","account":"123456789012","time":%q,"region":%q,"resources":["arn:aws:ssm:%s:123456789012:parameter%s"],`+
						`"detail":{"operation":"Update","name":%q,"type":"String"}}`,
						time.Now().UTC().Format(time.RFC3339), testenv.Region, testenv.Region, parameter, parameter)
					_, err = e.sqs.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(e.queueURL), MessageBody: aws.String(event)})
					require.NoError(t, err)
					changed = true
				}
				if r := e.rollout(ctx); changed && r.Phase == state.PhaseCompleted && r.TargetImageID == e.amiNew {
					_ = a.cmd.Process.Signal(os.Interrupt)
					select {
					case <-a.exited:
					case <-time.After(10 * time.Second):
						a.kill()
					}
					return starts
				}
				if time.Now().After(deadline) {
					a.kill()
					killed, done = true, true
				}
			}
		}
		e.agentProxy.mu.Lock()
		byProxy := e.agentProxy.killedPID == a.cmd.Process.Pid
		e.agentProxy.mu.Unlock()
		if !killed && !byProxy {
			t.Fatalf("agent exited on its own (%s): %s", a.cmd.ProcessState, tailFile(a.log))
		}
	}
	r := e.rollout(ctx)
	t.Fatalf("rollout not Completed within %s (phase %s, reason %q); last agent log: %s", rolloutWithin, r.Phase, r.Reason,
		tailFile(filepath.Join(e.dir, fmt.Sprintf("agent-%d.log", starts-1))))
	return starts
}

func tailFile(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return path + ":\n" + strings.Join(lines, "\n")
}

// checkInvariants asserts, from moto's state and the proxy's log, that the group ended on the new AMI with its
// capacity, limits and template as they should be, that each old instance was replaced by exactly one surge and
// one termination, and that every termination found its instance drained.
func (e *env) checkInvariants() {
	t, ctx := e.t, context.Background()
	g := e.describe(ctx)
	require.Equal(t, int32(desired), aws.ToInt32(g.DesiredCapacity), "desired capacity given back")
	require.Equal(t, int32(desired), aws.ToInt32(g.MaxSize), "max restored after the surges")
	now := e.inService(ctx)
	require.Len(t, now, desired)
	for _, id := range now {
		require.NotContains(t, e.original, id)
		out, err := e.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
		require.NoError(t, err)
		require.Equal(t, e.amiNew, aws.ToString(out.Reservations[0].Instances[0].ImageId), "instance %s", id)
	}
	versions, err := e.ec2.DescribeLaunchTemplateVersions(ctx, &ec2.DescribeLaunchTemplateVersionsInput{LaunchTemplateId: aws.String(e.templateID)})
	require.NoError(t, err)
	require.Len(t, versions.LaunchTemplateVersions, 2, "one launch template version created, never a second")
	require.Equal(t, "2", aws.ToString(g.LaunchTemplate.Version), "the group points at the new version explicitly")

	e.mu.Lock()
	seen, minActive := len(e.seen), e.minHealthyActive
	e.mu.Unlock()
	require.Equal(t, 2*desired, seen, "exactly one surge instance per replaced instance was ever launched")
	require.GreaterOrEqual(t, minActive, desired, "in-service capacity with an ACTIVE container instance never fell below desired")

	var surges, terminated []string
	// A surge is a call that raised desired capacity: SetDesiredCapacity, or UpdateAutoScalingGroup when max is
	// raised with it.
	for _, c := range append(e.agentProxy.calls("SetDesiredCapacity"), e.agentProxy.calls("UpdateAutoScalingGroup")...) {
		before, _ := strconv.Atoi(c.Before)
		asked, _ := strconv.Atoi(c.Form.Get("DesiredCapacity"))
		if c.Status == 200 && c.Form.Get("DesiredCapacity") != "" && asked > before {
			surges = append(surges, c.Before+"->"+c.Form.Get("DesiredCapacity"))
		}
	}
	for _, c := range e.agentProxy.calls("TerminateInstanceInAutoScalingGroup") {
		if c.Status != 200 || !strings.HasPrefix(c.Before, "InService") {
			continue // a repeat for an instance already terminating has no effect
		}
		require.Equal(t, "true", c.Form.Get("ShouldDecrementDesiredCapacity"))
		require.Equal(t, "InService DRAINING tasks=0", c.Before, "instance %s terminated before it was drained", c.Form.Get("InstanceId"))
		terminated = append(terminated, c.Form.Get("InstanceId"))
	}
	require.Len(t, surges, desired, "one surge per replaced instance: %v", surges)
	sort.Strings(terminated)
	require.Equal(t, e.original, terminated, "one termination per replaced instance, each old instance once")
	require.True(t, slices.IsSorted(e.original))
}

// The real binary rolls a 3-instance ECS group with tasks on its instances to a new AMI over the wire.
func TestE2ERollsAnECSGroupWithTasksToTheNewAMI(t *testing.T) {
	e := newEnv(t)
	start := time.Now()
	starts := e.roll(0, 1)
	t.Logf("rollout Completed in %s with %d agent start(s)", time.Since(start).Round(100*time.Millisecond), starts)
	require.Equal(t, 1, starts)
	e.checkInvariants()
	require.NotEmpty(t, e.agentProxy.calls("DescribeTasks"), "the drain was checked on the tasks (answers repaired by the proxy)")
	for _, op := range []string{"ReceiveMessage", "DeleteMessage", "PutEvents", "GetParameters"} {
		calls := e.agentProxy.calls(op)
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

// Invariant 5 over the wire: SIGKILL right after each kind of mutating call was applied and before its answer
// reached the agent, and at seeded random moments; every restart resumes, and the rollout ends Completed with
// no effect repeated.
func TestE2EKilledMidCallResumesWithoutRepeatingAnEffect(t *testing.T) {
	e := newEnv(t)
	kinds := map[string]int{"CreateLaunchTemplateVersion": 1, "UpdateAutoScalingGroup": 1, "SetDesiredCapacity": 1,
		"UpdateContainerInstancesState": 1, "TerminateInstanceInAutoScalingGroup": 1}
	kinds["PutItem"] = 8 // a DynamoDB write of the agent's record, applied but never acknowledged
	e.agentProxy.mu.Lock()
	for k, n := range kinds {
		e.agentProxy.killAt[k] = n
	}
	e.agentProxy.mu.Unlock()
	start := time.Now()
	starts := e.roll(3, 19)
	t.Logf("rollout Completed in %s with %d agent starts", time.Since(start).Round(100*time.Millisecond), starts)

	var killed []string
	e.agentProxy.mu.Lock()
	for _, c := range e.agentProxy.log {
		if c.Killed {
			killed = append(killed, c.Operation)
		}
	}
	left := len(e.agentProxy.killAt)
	e.agentProxy.mu.Unlock()
	sort.Strings(killed)
	t.Logf("killed right after: %v; killed at a random moment: %d", killed, e.randomKills)
	require.Zero(t, left, "every kind of mutating call was hit: %v", killed)
	require.GreaterOrEqual(t, starts, len(kinds)+1)
	e.checkInvariants()
}
