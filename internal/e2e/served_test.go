package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/sim/wire"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testenv"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

const (
	// launchHook is the served group's launching lifecycle hook to the agent's queue (beside the terminating
	// one, testworld.HookName).
	launchHook = testworld.LaunchHookName
	// servedRolloutWithin bounds one whole rollout of the served world, restarts included.
	servedRolloutWithin = 2 * time.Minute
	// servedSpeed is how much faster than the wall clock the served account's clock runs: the account's waits
	// (boot, container agent, task stops, the visibility timeout of a lifecycle action the agent holds until
	// its instance is healthy) pass in a fifth of their time, while the agent's own timers (heartbeats every
	// few seconds against hook timeouts of minutes) keep their margin.
	servedSpeed = 5
)

// servedMutating are the calls of the agent to the served account whose effect a kill right after must not
// repeat or lose.
var servedMutating = []string{"CreateLaunchTemplateVersion", "UpdateAutoScalingGroup",
	"TerminateInstanceInAutoScalingGroup", "CompleteLifecycleAction", "RecordLifecycleActionHeartbeat",
	"UpdateContainerInstancesState", "StartInstanceRefresh", "CancelInstanceRefresh", "RollbackInstanceRefresh", "DeleteMessage",
	"DeleteMessageBatch", "ChangeMessageVisibility"}

// served is a world of the simulated account served on localhost (internal/sim/wire) with its clock moving
// with the wall clock, the agent's table on kumo behind a logging proxy, and the real binary.
type served struct {
	t        *testing.T
	w        *testworld.World
	srv      *wire.Server
	ddbProxy *proxy
	ddb      *dynamodb.Client
	table    string
	bin, dir string

	mu      sync.Mutex
	current *agent
	killAt  map[string]bool // operation -> kill right after its first applied call
	killed  []string        // operations whose answer a kill cut off
	deaths  int             // incarnations killed
	// stopping is set once the rollout is done: the last incarnation's shutdown (held messages released,
	// handled wake-ups deleted) is not killed.
	stopping bool
	counts   map[string]int
	// writesBefore is how many capacity writes the account recorded before the agent started (the world's
	// own setup).
	writesBefore int
}

// newServed builds the demo's ECS group (desired 3, min 3, max 6, a service of 6 tasks and a daemon service,
// both lifecycle hooks to the agent's queue; rolled by instance refresh, the only strategy) on a simulated
// account whose instances boot in seconds.
func newServed(t *testing.T) *served {
	spec := testworld.DemoSpec()
	spec.Groups = spec.Groups[:1]
	spec.Sim = sim.Options{BootDelay: 3 * time.Second, AgentConnectDelay: time.Second, TaskStartDelay: time.Second,
		TaskStopStageDelay: time.Second, TerminateDelay: 2 * time.Second}
	w, err := testworld.Build(spec)
	require.NoError(t, err)
	// The group's owner set a warm-up of seconds, as for a service that is ready at once: an instance refresh
	// counts a replacement updated once InService and past it (API Reference, RefreshPreferences).
	_, err = w.Account.AutoScaling().(*sim.AutoScalingClient).UpdateAutoScalingGroup(context.Background(), &autoscaling.UpdateAutoScalingGroupInput{
		AutoScalingGroupName: aws.String(testworld.GroupName), DefaultInstanceWarmup: aws.Int32(10)})
	require.NoError(t, err)
	// The stack's EventBridge rules put the events that end the agent's waits (an instance InService, a
	// container instance ACTIVE and connected, a drain done) on its queue.
	w.Account.RouteWakeUpEvents(w.QueueURL)
	w.Checker.Queue = w.QueueURL
	w.Checker.Start()

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv, err := wire.Start(ctx, w.Account)
	require.NoError(t, err)
	go wire.Drive(ctx, w.Account, servedSpeed, 50*time.Millisecond)

	s := &served{t: t, w: w, srv: srv, bin: agentBinary(t), dir: servedLogDir(t),
		killAt: map[string]bool{}, counts: map[string]int{}}
	kumo := testenv.Kumo(t)
	s.ddbProxy = newProxy(t, kumo)
	s.ddb = dynamodb.NewFromConfig(clientConfig(kumo))
	s.table = testenv.UniqueName(t, "served")
	require.NoError(t, state.CreateTable(testenv.Context(t), s.ddb, s.table))
	srv.AfterApplied(s.afterApplied)
	s.writesBefore = len(w.Account.CapacityWrites())
	t.Logf("served account %s, table proxy %s", srv.URL, s.ddbProxy.URL)
	return s
}

// afterApplied kills the agent right after the first applied call of each operation in killAt, before its
// answer leaves the server.
func (s *served) afterApplied(c wire.Call) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.Status != 200 || s.stopping {
		return false
	}
	s.counts[c.Operation]++
	if !s.killAt[c.Operation] || s.current == nil {
		return false
	}
	delete(s.killAt, c.Operation)
	s.killLocked(c.Operation)
	return true
}

// killLocked SIGKILLs the running incarnation (unless a kill of a concurrent call got it first) and records
// that op's answer never reached it. Callers hold s.mu.
func (s *served) killLocked(op string) {
	s.killed = append(s.killed, op)
	select {
	case <-s.current.exited:
		return
	default:
	}
	s.deaths++
	s.current.kill()
}

func (s *served) start(n int) *agent {
	log := filepath.Join(s.dir, fmt.Sprintf("agent-%d.log", n))
	f, err := os.Create(log)
	require.NoError(s.t, err)
	defer f.Close()
	cmd := exec.Command(s.bin, "run", "--region", testenv.Region, "--queue-url", s.w.QueueURL, "--table", s.table,
		"--reconcile-interval", "500ms", "--poll-interval", "1m", "--metrics-interval", "10s", "--health-addr", "",
		"--owner-id", "e2e-agent", "--log-level", "debug")
	cmd.Env = append(os.Environ(), s.srv.Env()...)
	cmd.Env = append(cmd.Env,
		// Every service the served world does not serve reaches it too, and is answered UnknownOperation.
		"AWS_ENDPOINT_URL="+s.srv.URL,
		// The agent's table and its metrics are kumo's.
		"AWS_ENDPOINT_URL_DYNAMODB="+s.ddbProxy.URL, "AWS_ENDPOINT_URL_CLOUDWATCH="+testenv.Kumo(s.t), "AWS_DISABLE_REQUEST_COMPRESSION=true",
		"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null")
	cmd.Stdout, cmd.Stderr = f, f
	require.NoError(s.t, cmd.Start())
	a := &agent{cmd: cmd, exited: make(chan struct{}), log: log}
	go func() { _ = cmd.Wait(); close(a.exited) }()
	return a
}

func (s *served) rollout() state.Rollout {
	r, err := state.NewDynamoDB(s.ddb, s.table).GetRollout(context.Background(), testworld.GroupName)
	if err != nil {
		return state.Rollout{}
	}
	return r
}

// onNewAMI reports whether the group has its desired capacity InService, every instance on the new AMI.
func (s *served) onNewAMI() bool {
	g := s.w.Account.Group(testworld.GroupName)
	n := 0
	for _, i := range g.Instances {
		if i.ImageID != testworld.ImageB {
			return false
		}
		if i.LifecycleState == "InService" {
			n++
		}
	}
	return n == int(g.Desired) && len(g.Instances) == int(g.Desired)
}

// roll publishes the new AMI once the agent has read the old one and runs the agent until its rollout is
// Completed on the new AMI and the group is on it, restarting it whenever it was killed. It returns how many
// times the agent was started.
func (s *served) roll() (starts int) {
	t := s.t
	published := false
	deadline := time.Now().Add(servedRolloutWithin)
	for time.Now().Before(deadline) {
		a := s.start(starts)
		starts++
		s.mu.Lock()
		s.current = a
		s.mu.Unlock()
		for done := false; !done; {
			select {
			case <-a.exited:
				done = true
			case <-time.After(200 * time.Millisecond):
				if !published && len(s.srv.Calls("GetParameters")) > 0 {
					// As a pipeline would: the parameter, and EventBridge's Parameter Store Change event on the queue.
					s.w.PublishAMI(testworld.Parameter, testworld.ImageB)
					published = true
				}
				if r := s.rollout(); published && r.Phase == state.PhaseCompleted && r.TargetImageID == testworld.ImageB && s.onNewAMI() {
					s.mu.Lock()
					s.stopping = true
					s.mu.Unlock()
					s.ddbProxy.mu.Lock()
					s.ddbProxy.kill = nil
					s.ddbProxy.mu.Unlock()
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
					done = true
				}
			}
		}
		s.mu.Lock()
		killed := s.deaths >= starts
		s.mu.Unlock()
		if !killed && time.Now().Before(deadline) {
			t.Fatalf("agent exited on its own (%s): %s", a.cmd.ProcessState, tailFile(a.log))
		}
	}
	r := s.rollout()
	t.Fatalf("rollout not Completed on the new AMI within %s (phase %s, reason %q, group %+v); last agent log: %s", servedRolloutWithin,
		r.Phase, r.Reason, s.w.Account.Group(testworld.GroupName), tailFile(filepath.Join(s.dir, fmt.Sprintf("agent-%d.log", starts-1))))
	return starts
}

// check asserts what the served world and the server's log say of the rollout: every call was served, every
// launching and terminating lifecycle action of the rollout was completed by a CompleteLifecycleAction call
// of the agent, and the invariant checker found nothing.
func (s *served) check(old []string) {
	t := s.t
	require.Empty(t, s.srv.Unknown(), "every call of the agent was served")
	ops := map[string]bool{}
	for _, c := range s.srv.Calls("") {
		ops[c.Service+":"+c.Operation] = true
	}
	served := make([]string, 0, len(ops))
	for op := range ops {
		served = append(served, op)
	}
	sort.Strings(served)
	t.Logf("operations served: %s", strings.Join(served, " "))
	require.True(t, s.onNewAMI())
	completed := map[string]string{} // instance -> hook names completed, through the server
	tokens := map[string]sim.Completion{}
	for _, c := range s.w.Account.LifecycleCompletions() {
		tokens[c.Token] = c
	}
	for _, c := range s.srv.Calls("CompleteLifecycleAction") {
		if c.Status != 200 {
			continue
		}
		id := c.Param("InstanceId")
		if id == "" {
			id = tokens[c.Param("LifecycleActionToken")].InstanceID
		}
		completed[id] += c.Param("LifecycleHookName") + " "
	}
	for _, id := range old {
		require.Contains(t, completed[id], testworld.HookName, "the terminating action of old instance %s was completed", id)
	}
	for _, i := range s.w.Account.Group(testworld.GroupName).Instances {
		require.Contains(t, completed[i.ID], launchHook, "the launching action of new instance %s was completed", i.ID)
	}
	s.w.Account.Advance(0)
	violations := s.w.Checker.Finish()
	require.Empty(t, violations, "invariant violations")
}

func (s *served) instanceIDs() []string {
	var ids []string
	for _, i := range s.w.Account.Group(testworld.GroupName).Instances {
		ids = append(ids, i.ID)
	}
	sort.Strings(ids)
	return ids
}

func (s *served) killAll() {
	s.mu.Lock()
	for _, op := range servedMutating {
		s.killAt[op] = true
	}
	s.mu.Unlock()
	s.ddbProxy.mu.Lock()
	s.ddbProxy.killAt["PutItem"] = 8
	s.ddbProxy.kill = func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.killLocked("PutItem")
	}
	s.ddbProxy.mu.Unlock()
}

// reportKills asserts that every mutating operation the rollout made was hit by a kill.
func (s *served) reportKills(t *testing.T, start time.Time, starts int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t.Logf("rollout Completed in %s with %d agent starts; killed right after: %s", time.Since(start).Round(100*time.Millisecond),
		starts, strings.Join(s.killed, ", "))
	for op := range s.counts {
		if s.killAt[op] {
			t.Errorf("operation %s was applied but no kill hit it", op)
		}
	}
	require.Equal(t, s.deaths+1, starts)
	require.Contains(t, s.killed, "PutItem")
}

// servedLogDir is where the agents' logs go: $PATCH_AGENT_E2E_LOGS (kept after the test) or a temporary folder.
func servedLogDir(t *testing.T) string {
	if d := os.Getenv("PATCH_AGENT_E2E_LOGS"); d != "" {
		d = filepath.Join(d, t.Name())
		require.NoError(t, os.MkdirAll(d, 0o755))
		return d
	}
	return t.TempDir()
}

// logSlowCalls logs the calls the server took more than a second to answer (ReceiveMessage waits by design).
func (s *served) logSlowCalls() {
	for _, c := range s.srv.Calls("") {
		if c.Took > time.Second && c.Operation != "ReceiveMessage" {
			s.t.Logf("slow call: %s %s took %s", c.Service, c.Operation, c.Took)
		}
	}
}

// logCapacityCalls logs the agent's calls that change the group's capacity, in order.
func (s *served) logCapacityCalls() {
	for _, c := range s.srv.Calls("") {
		switch c.Operation {
		case "SetDesiredCapacity", "UpdateAutoScalingGroup", "TerminateInstanceInAutoScalingGroup", "StartInstanceRefresh":
			s.t.Logf("%s %v status %d %s dropped=%t", c.Operation, c.Params, c.Status, c.Code, c.Dropped)
		}
	}
}

// The real binary rolls the served ECS group to a new AMI by instance refresh: exactly one StartInstanceRefresh,
// no write of desired capacity or MaxSize, both lifecycle hooks of every replacement completed by the agent, no
// invariant broken.
func TestE2EServedSimRefreshRollsAnECSGroup(t *testing.T) {
	t.Parallel() // the served worlds share nothing but kumo, where each has its own table
	s := newServed(t)
	old := s.instanceIDs()
	start := time.Now()
	starts := s.roll()
	t.Logf("rollout Completed in %s with %d agent start(s), %d calls served", time.Since(start).Round(100*time.Millisecond), starts,
		len(s.srv.Calls("")))
	require.Equal(t, 1, starts)
	s.logCapacityCalls()
	s.checkRefresh()
	s.check(old)
}

// The refresh rollout, the agent SIGKILLed right after the first applied call of every mutating operation
// (StartInstanceRefresh and the lifecycle actions included) and the 8th DynamoDB PutItem, before the answer
// reached it, and restarted each time: it ends on the new AMI with exactly one StartInstanceRefresh and no
// write of desired capacity or MaxSize.
func TestE2EServedSimRefreshKilledAtEveryEffectResumes(t *testing.T) {
	t.Parallel() // the served worlds share nothing but kumo, where each has its own table
	s := newServed(t)
	s.killAll()
	old := s.instanceIDs()
	start := time.Now()
	starts := s.roll()
	s.reportKills(t, start, starts)
	s.logCapacityCalls()
	require.Contains(t, s.killed, "StartInstanceRefresh")
	s.checkRefresh()
	s.check(old)
}

// checkRefresh asserts from the server's log and the account's capacity writes that the rollout started
// exactly one instance refresh and left the group to Auto Scaling: no SetDesiredCapacity, no
// TerminateInstanceInAutoScalingGroup and no UpdateAutoScalingGroup call at all, and no write through the API
// since the agent started that moved desired capacity or MaxSize.
func (s *served) checkRefresh() {
	t := s.t
	started := 0
	for _, c := range s.srv.Calls("StartInstanceRefresh") {
		if c.Status == 200 {
			started++
		}
	}
	require.Equal(t, 1, started, "one StartInstanceRefresh applied per rollout")
	require.Empty(t, s.srv.Calls("SetDesiredCapacity"), "no SetDesiredCapacity call")
	require.Empty(t, s.srv.Calls("TerminateInstanceInAutoScalingGroup"), "no TerminateInstanceInAutoScalingGroup call")
	require.Empty(t, s.srv.Calls("UpdateAutoScalingGroup"), "no UpdateAutoScalingGroup call")
	writes := s.w.Account.CapacityWrites()
	for _, w := range writes[s.writesBefore:] {
		if w.By != sim.CallerAPI {
			continue
		}
		require.False(t, w.Decrement, "capacity write %s", w)
		require.Equal(t, w.From, w.To, "capacity write %s moved desired capacity", w)
		require.Equal(t, w.MaxFrom, w.MaxTo, "capacity write %s moved MaxSize", w)
	}
}
