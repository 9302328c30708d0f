package sim

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"
)

// refreshGroup creates group "g" on launch template version 1 (ami-old) and a version 2 (ami-new), and returns
// the account and the template id.
func refreshGroup(t *testing.T, spec GroupSpec) (*Account, string) {
	t.Helper()
	a := newAccount(t)
	lt := a.CreateLaunchTemplate("lt", "ami-old", "m6i.large")
	spec.Name, spec.LaunchTemplateID = "g", lt
	if spec.LaunchTemplateVersion == "" {
		spec.LaunchTemplateVersion = "1"
	}
	require.NoError(t, a.CreateGroup(spec))
	require.Equal(t, int64(2), a.CreateLaunchTemplateVersion(lt, "ami-new"))
	return a, lt
}

func toVersion(lt, version string) *astypes.DesiredConfiguration {
	return &astypes.DesiredConfiguration{LaunchTemplate: &astypes.LaunchTemplateSpecification{LaunchTemplateId: aws.String(lt), Version: aws.String(version)}}
}

func startRefresh(t *testing.T, a *Account, desired *astypes.DesiredConfiguration, prefs *astypes.RefreshPreferences) string {
	t.Helper()
	out, err := a.AutoScaling().StartInstanceRefresh(context.Background(), &autoscaling.StartInstanceRefreshInput{
		AutoScalingGroupName: aws.String("g"), DesiredConfiguration: desired, Preferences: prefs})
	require.NoError(t, err)
	return aws.ToString(out.InstanceRefreshId)
}

func latestRefresh(t *testing.T, a *Account) astypes.InstanceRefresh {
	t.Helper()
	out, err := a.AutoScaling().DescribeInstanceRefreshes(context.Background(), &autoscaling.DescribeInstanceRefreshesInput{AutoScalingGroupName: aws.String("g")})
	require.NoError(t, err)
	require.NotEmpty(t, out.InstanceRefreshes)
	return out.InstanceRefreshes[0]
}

// runRefresh advances the clock by 10 s steps, completing every lifecycle action of the hooks named in
// complete with CONTINUE, until the refresh reaches one of the statuses or limit passes.
func runRefresh(t *testing.T, a *Account, limit time.Duration, complete map[string]bool, until ...astypes.InstanceRefreshStatus) astypes.InstanceRefresh {
	t.Helper()
	end := a.Clock().Now().Add(limit)
	for {
		r := latestRefresh(t, a)
		for _, s := range until {
			if r.Status == s {
				return r
			}
		}
		if !a.Clock().Now().Before(end) {
			return r
		}
		completeActions(t, a, complete)
		a.Advance(10 * time.Second)
	}
}

func completeActions(t *testing.T, a *Account, hooks map[string]bool) {
	t.Helper()
	var acts []LifecycleAction
	a.Observe(func(v *View) { acts = v.LifecycleActions() })
	for _, act := range acts {
		if act.Active && hooks[act.Hook] {
			_, err := a.AutoScaling().CompleteLifecycleAction(context.Background(), &autoscaling.CompleteLifecycleActionInput{
				AutoScalingGroupName: aws.String(act.Group), LifecycleHookName: aws.String(act.Hook),
				LifecycleActionToken: aws.String(act.Token), LifecycleActionResult: aws.String(ResultContinue)})
			require.NoError(t, err)
		}
	}
}

func serving(g GroupView) (inService, counting int) {
	for _, i := range g.Instances {
		if i.LifecycleState == string(astypes.LifecycleStateInService) {
			inService++
		}
		if countsTowardCapacity(i.LifecycleState) {
			counting++
		}
	}
	return
}

func onVersion(g GroupView, version string) int {
	n := 0
	for _, i := range g.Instances {
		if countsTowardCapacity(i.LifecycleState) && i.LaunchTemplateVersion == version {
			n++
		}
	}
	return n
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// Statuses Pending -> InProgress -> Successful; once successful the group takes the desired configuration.
// API Reference, InstanceRefresh (Status) and StartInstanceRefresh (DesiredConfiguration).
func TestRefreshGoesPendingInProgressSuccessfulAndTheGroupTakesTheDesiredConfiguration(t *testing.T) {
	a, lt := refreshGroup(t, GroupSpec{Min: 1, Max: 4, Desired: 3})
	startRefresh(t, a, toVersion(lt, "2"), &astypes.RefreshPreferences{MinHealthyPercentage: aws.Int32(100), MaxHealthyPercentage: aws.Int32(110), InstanceWarmup: aws.Int32(60)})
	r := latestRefresh(t, a)
	require.Equal(t, astypes.InstanceRefreshStatusPending, r.Status)
	require.Equal(t, "1", a.Group("g").LaunchTemplateVersion, "the group keeps its configuration while the refresh runs")
	a.Advance(refreshPendingDelay)
	require.Equal(t, astypes.InstanceRefreshStatusInProgress, latestRefresh(t, a).Status)
	require.Equal(t, "1", a.Group("g").LaunchTemplateVersion)

	r = runRefresh(t, a, 2*time.Hour, nil, astypes.InstanceRefreshStatusSuccessful, astypes.InstanceRefreshStatusFailed)
	require.Equal(t, astypes.InstanceRefreshStatusSuccessful, r.Status, aws.ToString(r.StatusReason))
	require.Equal(t, int32(100), aws.ToInt32(r.PercentageComplete))
	require.Equal(t, int32(0), aws.ToInt32(r.InstancesToUpdate))
	require.NotNil(t, r.EndTime)
	g := a.Group("g")
	require.Equal(t, "2", g.LaunchTemplateVersion)
	require.Equal(t, 3, onVersion(g, "2"))
	require.Equal(t, 0, onVersion(g, "1"))
}

// MinHealthyPercentage 100 with MaxHealthyPercentage given: launch before terminate; where both bounds cannot
// be honoured (3 x 110 % rounds to 3), one instance is launched before one is terminated.
// API Reference, RefreshPreferences: MaxHealthyPercentage.
func TestRefreshAtMin100Max110LaunchesOneBeforeTerminatingOne(t *testing.T) {
	a, lt := refreshGroup(t, GroupSpec{Min: 1, Max: 6, Desired: 3})
	started := false
	minInService, maxCounting := 3, 0
	a.OnChange(func(v *View) {
		if !started {
			return
		}
		in, c := serving(v.Group("g"))
		minInService, maxCounting = min(minInService, in), max(maxCounting, c)
	})
	startRefresh(t, a, toVersion(lt, "2"), &astypes.RefreshPreferences{MinHealthyPercentage: aws.Int32(100), MaxHealthyPercentage: aws.Int32(110), InstanceWarmup: aws.Int32(60)})
	started = true
	r := runRefresh(t, a, 2*time.Hour, nil, astypes.InstanceRefreshStatusSuccessful, astypes.InstanceRefreshStatusFailed)
	require.Equal(t, astypes.InstanceRefreshStatusSuccessful, r.Status, aws.ToString(r.StatusReason))
	require.Equal(t, 3, minInService, "no old instance leaves service before its replacement is InService")
	require.Equal(t, 4, maxCounting, "one instance above the desired capacity at a time")
	terms := a.Terminations()
	require.Len(t, terms, 3)
	for _, term := range terms {
		require.Equal(t, CauseRefresh, term.Cause)
	}
}

// MaxHealthyPercentage omitted at MinHealthyPercentage 100: an instance is terminated and its replacement
// launched at the same time. API Reference, RefreshPreferences: MaxHealthyPercentage.
func TestRefreshAtMin100WithoutMaxHealthyTerminatesAndLaunchesTogether(t *testing.T) {
	a, lt := refreshGroup(t, GroupSpec{Min: 1, Max: 6, Desired: 3})
	started := false
	minInService, maxCounting := 3, 0
	a.OnChange(func(v *View) {
		if started {
			in, c := serving(v.Group("g"))
			minInService, maxCounting = min(minInService, in), max(maxCounting, c)
		}
	})
	startRefresh(t, a, toVersion(lt, "2"), &astypes.RefreshPreferences{MinHealthyPercentage: aws.Int32(100), InstanceWarmup: aws.Int32(60)})
	started = true
	r := runRefresh(t, a, 2*time.Hour, nil, astypes.InstanceRefreshStatusSuccessful, astypes.InstanceRefreshStatusFailed)
	require.Equal(t, astypes.InstanceRefreshStatusSuccessful, r.Status)
	require.Equal(t, 2, minInService, "one instance out of service while its replacement boots")
	require.Equal(t, 3, maxCounting, "never above the desired capacity")
}

// Min 100 / Max 200: the whole group is launched above the desired capacity first; the desired capacity never
// changes. API Reference, RefreshPreferences (MaxHealthyPercentage) and DESIGN (the agent never writes desired).
func TestRefreshAtMin100Max200LaunchesTheWholeBatchFirstAndNeverChangesDesiredCapacity(t *testing.T) {
	a, lt := refreshGroup(t, GroupSpec{Min: 1, Max: 6, Desired: 3})
	started := false
	minInService, maxCounting, desiredSeen := 3, 0, map[int32]bool{}
	a.OnChange(func(v *View) {
		if started {
			g := v.Group("g")
			in, c := serving(g)
			minInService, maxCounting = min(minInService, in), max(maxCounting, c)
			desiredSeen[g.Desired] = true
		}
	})
	startRefresh(t, a, toVersion(lt, "2"), &astypes.RefreshPreferences{MinHealthyPercentage: aws.Int32(100), MaxHealthyPercentage: aws.Int32(200), InstanceWarmup: aws.Int32(60)})
	started = true
	r := runRefresh(t, a, 2*time.Hour, nil, astypes.InstanceRefreshStatusSuccessful, astypes.InstanceRefreshStatusFailed)
	require.Equal(t, astypes.InstanceRefreshStatusSuccessful, r.Status)
	require.Equal(t, 3, minInService)
	require.Equal(t, 6, maxCounting)
	require.Equal(t, map[int32]bool{3: true}, desiredSeen)
}

// The model never runs a group above its MaxSize for a refresh (conservative: the documentation does not say a
// refresh may exceed it). At MaxSize = desired with launch before terminate, the refresh waits and says why.
func TestRefreshNeverTakesTheGroupAboveMaxSize(t *testing.T) {
	a, lt := refreshGroup(t, GroupSpec{Min: 1, Max: 3, Desired: 3})
	maxCounting := 0
	a.OnChange(func(v *View) { _, c := serving(v.Group("g")); maxCounting = max(maxCounting, c) })
	startRefresh(t, a, toVersion(lt, "2"), &astypes.RefreshPreferences{MinHealthyPercentage: aws.Int32(100), MaxHealthyPercentage: aws.Int32(200), InstanceWarmup: aws.Int32(60)})
	r := runRefresh(t, a, 30*time.Minute, nil, astypes.InstanceRefreshStatusSuccessful)
	require.Equal(t, 3, maxCounting)
	require.Equal(t, astypes.InstanceRefreshStatusInProgress, r.Status)
	require.Contains(t, aws.ToString(r.StatusReason), "MaxSize (3)")
	require.Empty(t, a.Terminations())
}

// Both lifecycle hooks apply to every launch and termination the refresh makes: Pending:Wait and
// Terminating:Wait. User Guide, "Amazon EC2 Auto Scaling lifecycle hooks" (instance refresh launches and
// terminates through the group's hooks).
func TestRefreshRunsTheLaunchingAndTerminatingHooksOnEveryReplacement(t *testing.T) {
	a, lt := refreshGroup(t, GroupSpec{Min: 1, Max: 4, Desired: 2, Hooks: []HookSpec{
		{Name: "launch", Transition: TransitionLaunching}, {Name: "drain", Transition: TransitionTerminating}}})
	waits := map[string]bool{}
	a.OnChange(func(v *View) {
		for _, i := range v.Group("g").Instances {
			waits[i.ID+" "+i.LifecycleState] = true
		}
	})
	startRefresh(t, a, toVersion(lt, "2"), &astypes.RefreshPreferences{MinHealthyPercentage: aws.Int32(100), MaxHealthyPercentage: aws.Int32(150), InstanceWarmup: aws.Int32(0)})
	r := runRefresh(t, a, 2*time.Hour, map[string]bool{"launch": true, "drain": true}, astypes.InstanceRefreshStatusSuccessful, astypes.InstanceRefreshStatusFailed)
	require.Equal(t, astypes.InstanceRefreshStatusSuccessful, r.Status)
	for _, term := range a.Terminations() {
		require.True(t, waits[term.InstanceID+" Terminating:Wait"], "%s terminated through its terminating hook", term.InstanceID)
	}
	for _, i := range a.Group("g").Instances {
		if countsTowardCapacity(i.LifecycleState) {
			require.Equal(t, "2", i.LaunchTemplateVersion)
			require.True(t, waits[i.ID+" Pending:Wait"], "%s launched through its launching hook", i.ID)
		}
	}
}

// InstanceWarmup defaults to the group's DefaultInstanceWarmup and counts from InService, after the launching
// hook completed. API Reference, RefreshPreferences: InstanceWarmup.
func TestRefreshWarmupDefaultsToDefaultInstanceWarmupAndStartsAfterTheLaunchingHook(t *testing.T) {
	warm := 5 * time.Minute
	a, lt := refreshGroup(t, GroupSpec{Min: 1, Max: 2, Desired: 1, DefaultInstanceWarmup: &warm,
		Hooks: []HookSpec{{Name: "launch", Transition: TransitionLaunching}}})
	startRefresh(t, a, toVersion(lt, "2"), &astypes.RefreshPreferences{MinHealthyPercentage: aws.Int32(100), MaxHealthyPercentage: aws.Int32(200)})
	a.Advance(20 * time.Minute) // the new instance waits in Pending:Wait all along
	require.Empty(t, a.Terminations())
	completeActions(t, a, map[string]bool{"launch": true})
	completedAt := a.Clock().Now()
	runRefresh(t, a, time.Hour, nil, astypes.InstanceRefreshStatusSuccessful)
	terms := a.Terminations()
	require.Len(t, terms, 1)
	require.False(t, terms[0].RequestedAt.Before(completedAt.Add(warm)), "terminated at %s, hook completed at %s", terms[0].RequestedAt, completedAt)
	require.True(t, terms[0].RequestedAt.Before(completedAt.Add(warm+20*time.Second)))
}

// Without DefaultInstanceWarmup the warm-up is the health check grace period. API Reference,
// RefreshPreferences: InstanceWarmup; User Guide, "Understand the default values for an instance refresh".
func TestRefreshWarmupFallsBackToTheHealthCheckGracePeriod(t *testing.T) {
	a, lt := refreshGroup(t, GroupSpec{Min: 1, Max: 2, Desired: 1, HealthCheckGracePeriod: 10 * time.Minute})
	startRefresh(t, a, toVersion(lt, "2"), &astypes.RefreshPreferences{MinHealthyPercentage: aws.Int32(100), MaxHealthyPercentage: aws.Int32(200)})
	runRefresh(t, a, time.Hour, nil, astypes.InstanceRefreshStatusSuccessful)
	terms := a.Terminations()
	require.Len(t, terms, 1)
	inService := start.Add(refreshPendingDelay + a.Options().BootDelay)
	require.False(t, terms[0].RequestedAt.Before(inService.Add(10*time.Minute)))
}

// SkipMatching leaves out instances already on the desired configuration; without it every instance is
// replaced. API Reference, RefreshPreferences: SkipMatching.
func TestRefreshSkipMatchingLeavesInstancesOnTheDesiredConfiguration(t *testing.T) {
	for _, skip := range []bool{true, false} {
		a, lt := refreshGroup(t, GroupSpec{Min: 1, Max: 6, Desired: 2})
		_, err := a.AutoScaling().(*AutoScalingClient).UpdateAutoScalingGroup(context.Background(), &autoscaling.UpdateAutoScalingGroupInput{AutoScalingGroupName: aws.String("g"),
			DesiredCapacity: aws.Int32(3), LaunchTemplate: &astypes.LaunchTemplateSpecification{LaunchTemplateId: aws.String(lt), Version: aws.String("2")}})
		require.NoError(t, err)
		a.Advance(5 * time.Minute)
		var matching string
		for _, i := range a.Group("g").Instances {
			if i.LaunchTemplateVersion == "2" {
				matching = i.ID
			}
		}
		require.NotEmpty(t, matching)
		startRefresh(t, a, toVersion(lt, "2"), &astypes.RefreshPreferences{SkipMatching: aws.Bool(skip), MinHealthyPercentage: aws.Int32(100), MaxHealthyPercentage: aws.Int32(200), InstanceWarmup: aws.Int32(0)})
		a.Advance(refreshPendingDelay)
		want := int32(2)
		if !skip {
			want = 3
		}
		require.Equal(t, want, aws.ToInt32(latestRefresh(t, a).InstancesToUpdate), "skip matching %v", skip)
		require.Equal(t, astypes.InstanceRefreshStatusSuccessful, runRefresh(t, a, time.Hour, nil, astypes.InstanceRefreshStatusSuccessful).Status)
		replaced := false
		for _, term := range a.Terminations() {
			replaced = replaced || term.InstanceID == matching
		}
		require.Equal(t, !skip, replaced, "skip matching %v", skip)
	}
}

// ScaleInProtectedInstances: Wait (default) waits an hour with a status reason, then fails; Ignore leaves the
// instance; Refresh replaces it. API Reference, RefreshPreferences: ScaleInProtectedInstances.
func TestRefreshProtectedInstancesWaitByDefaultIgnoreOrRefresh(t *testing.T) {
	for _, mode := range []astypes.ScaleInProtectedInstances{"", astypes.ScaleInProtectedInstancesIgnore, astypes.ScaleInProtectedInstancesRefresh} {
		a, lt := refreshGroup(t, GroupSpec{Min: 1, Max: 4, Desired: 2})
		protected := a.Group("g").Instances[0].ID
		require.True(t, a.ProtectInstance(protected, true))
		startRefresh(t, a, toVersion(lt, "2"), &astypes.RefreshPreferences{ScaleInProtectedInstances: mode, MinHealthyPercentage: aws.Int32(50), InstanceWarmup: aws.Int32(0)})
		switch mode {
		case "":
			r := runRefresh(t, a, 30*time.Minute, nil, astypes.InstanceRefreshStatusFailed)
			require.Equal(t, astypes.InstanceRefreshStatusInProgress, r.Status)
			require.Contains(t, aws.ToString(r.StatusReason), "protected from scale in")
			r = runRefresh(t, a, 40*time.Minute, nil, astypes.InstanceRefreshStatusFailed)
			require.Equal(t, astypes.InstanceRefreshStatusFailed, r.Status)
			_, ok := a.Instance(protected)
			require.True(t, ok)
			require.Equal(t, "InService", mustInstance(t, a, protected).LifecycleState)
		case astypes.ScaleInProtectedInstancesIgnore:
			require.Equal(t, astypes.InstanceRefreshStatusSuccessful, runRefresh(t, a, time.Hour, nil, astypes.InstanceRefreshStatusSuccessful).Status)
			require.Equal(t, "InService", mustInstance(t, a, protected).LifecycleState)
		default:
			require.Equal(t, astypes.InstanceRefreshStatusSuccessful, runRefresh(t, a, time.Hour, nil, astypes.InstanceRefreshStatusSuccessful).Status)
			require.NotEqual(t, "InService", mustInstance(t, a, protected).LifecycleState)
		}
	}
}

func mustInstance(t *testing.T, a *Account, id string) InstanceView {
	t.Helper()
	v, ok := a.Instance(id)
	require.True(t, ok)
	return v
}

// StandbyInstances: Wait (default) waits with a status reason, Terminate terminates, Ignore leaves the Standby
// instance. API Reference, RefreshPreferences: StandbyInstances.
func TestRefreshStandbyInstancesWaitByDefaultTerminateOrIgnore(t *testing.T) {
	for _, mode := range []astypes.StandbyInstances{"", astypes.StandbyInstancesTerminate, astypes.StandbyInstancesIgnore} {
		a, lt := refreshGroup(t, GroupSpec{Min: 1, Max: 4, Desired: 3})
		standby := a.Group("g").Instances[0].ID
		require.NoError(t, a.EnterStandby(standby))
		startRefresh(t, a, toVersion(lt, "2"), &astypes.RefreshPreferences{StandbyInstances: mode, MinHealthyPercentage: aws.Int32(50), InstanceWarmup: aws.Int32(0)})
		r := runRefresh(t, a, 30*time.Minute, nil, astypes.InstanceRefreshStatusSuccessful, astypes.InstanceRefreshStatusFailed)
		switch mode {
		case "":
			require.Equal(t, astypes.InstanceRefreshStatusInProgress, r.Status)
			require.Contains(t, aws.ToString(r.StatusReason), "Standby")
			require.Equal(t, "Standby", mustInstance(t, a, standby).LifecycleState)
			require.NoError(t, a.ExitStandby(standby))
			require.Equal(t, astypes.InstanceRefreshStatusSuccessful, runRefresh(t, a, time.Hour, nil, astypes.InstanceRefreshStatusSuccessful).Status)
		case astypes.StandbyInstancesTerminate:
			require.Equal(t, astypes.InstanceRefreshStatusSuccessful, r.Status)
			require.NotEqual(t, "Standby", mustInstance(t, a, standby).LifecycleState)
		default:
			require.Equal(t, astypes.InstanceRefreshStatusSuccessful, r.Status)
			require.Equal(t, "Standby", mustInstance(t, a, standby).LifecycleState)
		}
	}
}

// CheckpointPercentages + CheckpointDelay: the refresh pauses at each checkpoint for the delay. API Reference,
// RefreshPreferences; User Guide, "Add checkpoints to an instance refresh".
func TestRefreshPausesAtEachCheckpointForTheCheckpointDelay(t *testing.T) {
	a, lt := refreshGroup(t, GroupSpec{Min: 1, Max: 4, Desired: 2})
	startRefresh(t, a, toVersion(lt, "2"), &astypes.RefreshPreferences{MinHealthyPercentage: aws.Int32(100), MaxHealthyPercentage: aws.Int32(150),
		InstanceWarmup: aws.Int32(0), CheckpointPercentages: []int32{50, 100}, CheckpointDelay: aws.Int32(1800)})
	var r astypes.InstanceRefresh
	for i := 0; i < 100; i++ {
		a.Advance(10 * time.Second)
		if r = latestRefresh(t, a); aws.ToInt32(r.PercentageComplete) == 50 {
			break
		}
	}
	require.Contains(t, aws.ToString(r.StatusReason), "checkpoint 50%")
	terms := len(a.Terminations())
	a.Advance(29 * time.Minute)
	require.Len(t, a.Terminations(), terms, "nothing replaced during the checkpoint delay")
	require.Equal(t, astypes.InstanceRefreshStatusSuccessful, runRefresh(t, a, 2*time.Hour, nil, astypes.InstanceRefreshStatusSuccessful).Status)
}

// AlarmSpecification: an alarm going into ALARM fails the refresh. API Reference, RefreshPreferences
// (AlarmSpecification).
func TestRefreshFailsWhenAnAlarmGoesIntoALARM(t *testing.T) {
	a, lt := refreshGroup(t, GroupSpec{Min: 1, Max: 4, Desired: 3})
	a.SetAlarm("errors", "OK")
	startRefresh(t, a, toVersion(lt, "2"), &astypes.RefreshPreferences{MinHealthyPercentage: aws.Int32(100), MaxHealthyPercentage: aws.Int32(110),
		InstanceWarmup: aws.Int32(300), AlarmSpecification: &astypes.AlarmSpecification{Alarms: []string{"errors"}}})
	a.Advance(3 * time.Minute)
	a.SetAlarm("errors", "ALARM")
	a.Advance(time.Minute)
	r := latestRefresh(t, a)
	require.Equal(t, astypes.InstanceRefreshStatusFailed, r.Status)
	require.Contains(t, aws.ToString(r.StatusReason), "errors")
}

// AlarmSpecification: at most 10 alarms; an alarm in INSUFFICIENT_DATA at the start is refused. API
// Reference, AlarmSpecification.
func TestRefreshRefusesMoreThanTenAlarmsAndAnAlarmInInsufficientData(t *testing.T) {
	a, lt := refreshGroup(t, GroupSpec{Min: 1, Max: 4, Desired: 1})
	var names []string
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"} {
		a.SetAlarm(n, "OK")
		names = append(names, n)
	}
	start := func(alarms []string) error {
		_, err := a.AutoScaling().StartInstanceRefresh(context.Background(), &autoscaling.StartInstanceRefreshInput{AutoScalingGroupName: aws.String("g"),
			DesiredConfiguration: toVersion(lt, "2"), Preferences: &astypes.RefreshPreferences{AlarmSpecification: &astypes.AlarmSpecification{Alarms: alarms}}})
		return err
	}
	require.Equal(t, "ValidationError", apiCode(start(names)))
	a.SetAlarm("new", "INSUFFICIENT_DATA")
	require.Equal(t, "ValidationError", apiCode(start([]string{"a", "new"})))
	require.NoError(t, start(names[:10]))
}

// AutoRollback: a failed refresh (here an alarm) rolls back to the previous configuration: RollbackInProgress
// then RollbackSuccessful, the group left on its previous configuration. API Reference, RefreshPreferences
// (AutoRollback), RollbackInstanceRefresh.
func TestRefreshAutoRollbackReturnsTheGroupToItsPreviousConfiguration(t *testing.T) {
	a, lt := refreshGroup(t, GroupSpec{Min: 1, Max: 4, Desired: 3})
	a.SetAlarm("errors", "OK")
	startRefresh(t, a, toVersion(lt, "2"), &astypes.RefreshPreferences{MinHealthyPercentage: aws.Int32(100), MaxHealthyPercentage: aws.Int32(110),
		InstanceWarmup: aws.Int32(60), AutoRollback: aws.Bool(true), AlarmSpecification: &astypes.AlarmSpecification{Alarms: []string{"errors"}}})
	for onVersion(a.Group("g"), "2") < 2 {
		a.Advance(10 * time.Second)
	}
	a.SetAlarm("errors", "ALARM")
	a.Advance(time.Minute)
	r := latestRefresh(t, a)
	require.Equal(t, astypes.InstanceRefreshStatusRollbackInProgress, r.Status)
	require.NotNil(t, r.RollbackDetails)
	require.Contains(t, aws.ToString(r.RollbackDetails.RollbackReason), "errors")
	r = runRefresh(t, a, 2*time.Hour, nil, astypes.InstanceRefreshStatusRollbackSuccessful, astypes.InstanceRefreshStatusRollbackFailed)
	require.Equal(t, astypes.InstanceRefreshStatusRollbackSuccessful, r.Status)
	g := a.Group("g")
	require.Equal(t, "1", g.LaunchTemplateVersion)
	require.Equal(t, 3, onVersion(g, "1"))
}

// RollbackInstanceRefresh prerequisites: a desired configuration and explicit versions (not $Latest or
// $Default) or IrreversibleInstanceRefresh; only a refresh in progress (never after Successful) or
// ActiveInstanceRefreshNotFound. API Reference, RollbackInstanceRefresh.
func TestRollbackNeedsADesiredConfigurationAnExplicitVersionAndARefreshInProgress(t *testing.T) {
	rollback := func(a *Account) error {
		_, err := a.AutoScaling().RollbackInstanceRefresh(context.Background(), &autoscaling.RollbackInstanceRefreshInput{AutoScalingGroupName: aws.String("g")})
		return err
	}
	prefs := func() *astypes.RefreshPreferences {
		return &astypes.RefreshPreferences{MinHealthyPercentage: aws.Int32(100), MaxHealthyPercentage: aws.Int32(200), InstanceWarmup: aws.Int32(0)}
	}

	a, _ := refreshGroup(t, GroupSpec{Min: 1, Max: 4, Desired: 2})
	startRefresh(t, a, nil, prefs())
	require.Equal(t, "IrreversibleInstanceRefresh", apiCode(rollback(a)), "no desired configuration")

	a, lt := refreshGroup(t, GroupSpec{Min: 1, Max: 4, Desired: 2, LaunchTemplateVersion: "$Default"})
	startRefresh(t, a, toVersion(lt, "2"), prefs())
	require.Equal(t, "IrreversibleInstanceRefresh", apiCode(rollback(a)), "the group on $Default")

	a, lt = refreshGroup(t, GroupSpec{Min: 1, Max: 4, Desired: 2})
	startRefresh(t, a, toVersion(lt, "$Latest"), prefs())
	require.Equal(t, "IrreversibleInstanceRefresh", apiCode(rollback(a)), "the desired configuration on $Latest")

	a, lt = refreshGroup(t, GroupSpec{Min: 1, Max: 4, Desired: 2})
	startRefresh(t, a, toVersion(lt, "2"), prefs())
	require.Equal(t, astypes.InstanceRefreshStatusSuccessful, runRefresh(t, a, time.Hour, nil, astypes.InstanceRefreshStatusSuccessful).Status)
	require.Equal(t, "ActiveInstanceRefreshNotFound", apiCode(rollback(a)), "after Successful")
	require.Equal(t, astypes.InstanceRefreshStatusSuccessful, latestRefresh(t, a).Status)

	a, lt = refreshGroup(t, GroupSpec{Min: 1, Max: 4, Desired: 2})
	startRefresh(t, a, toVersion(lt, "2"), prefs())
	a.Advance(time.Minute)
	require.NoError(t, rollback(a))
	require.Equal(t, astypes.InstanceRefreshStatusRollbackSuccessful, runRefresh(t, a, time.Hour, nil, astypes.InstanceRefreshStatusRollbackSuccessful).Status)
	require.Equal(t, 0, onVersion(a.Group("g"), "2"), "the instances the refresh launched are replaced again")
	require.Equal(t, 2, onVersion(a.Group("g"), "1"))
}

// CancelInstanceRefresh waits for the launches and terminations in flight (Cancelling), then Cancelled; it
// cancels a rollback too; without an active refresh it is ActiveInstanceRefreshNotFound. API Reference,
// CancelInstanceRefresh.
func TestCancelWaitsForLaunchesInFlightAndCancelsARollbackToo(t *testing.T) {
	cancel := func(a *Account) error {
		_, err := a.AutoScaling().CancelInstanceRefresh(context.Background(), &autoscaling.CancelInstanceRefreshInput{AutoScalingGroupName: aws.String("g")})
		return err
	}
	a, lt := refreshGroup(t, GroupSpec{Min: 1, Max: 4, Desired: 2, Hooks: []HookSpec{{Name: "launch", Transition: TransitionLaunching}}})
	require.Equal(t, "ActiveInstanceRefreshNotFound", apiCode(cancel(a)))
	startRefresh(t, a, toVersion(lt, "2"), &astypes.RefreshPreferences{MinHealthyPercentage: aws.Int32(100), MaxHealthyPercentage: aws.Int32(150), InstanceWarmup: aws.Int32(0)})
	a.Advance(5 * time.Minute) // the first replacement waits in Pending:Wait
	require.NoError(t, cancel(a))
	require.Equal(t, astypes.InstanceRefreshStatusCancelling, latestRefresh(t, a).Status)
	a.Advance(10 * time.Minute)
	require.Equal(t, astypes.InstanceRefreshStatusCancelling, latestRefresh(t, a).Status, "the launch in flight is waited for")
	completeActions(t, a, map[string]bool{"launch": true})
	a.Advance(10 * time.Second)
	require.Equal(t, astypes.InstanceRefreshStatusCancelled, latestRefresh(t, a).Status)
	require.Equal(t, "1", a.Group("g").LaunchTemplateVersion, "nothing is rolled back, nor applied")

	// The rollback's termination of the instance the refresh launched waits at the terminating hook.
	a, lt = refreshGroup(t, GroupSpec{Min: 1, Max: 4, Desired: 2, Hooks: []HookSpec{{Name: "drain", Transition: TransitionTerminating}}})
	startRefresh(t, a, toVersion(lt, "2"), &astypes.RefreshPreferences{MinHealthyPercentage: aws.Int32(100), MaxHealthyPercentage: aws.Int32(150), InstanceWarmup: aws.Int32(600)})
	a.Advance(3 * time.Minute)
	_, err := a.AutoScaling().RollbackInstanceRefresh(context.Background(), &autoscaling.RollbackInstanceRefreshInput{AutoScalingGroupName: aws.String("g")})
	require.NoError(t, err)
	require.Equal(t, astypes.InstanceRefreshStatusRollbackInProgress, latestRefresh(t, a).Status)
	require.NoError(t, cancel(a))
	require.Equal(t, astypes.InstanceRefreshStatusCancelling, latestRefresh(t, a).Status)
	a.Advance(5 * time.Minute)
	require.Equal(t, astypes.InstanceRefreshStatusCancelling, latestRefresh(t, a).Status, "the termination in flight is waited for")
	completeActions(t, a, map[string]bool{"drain": true})
	a.Advance(10 * time.Second)
	require.Equal(t, astypes.InstanceRefreshStatusCancelled, latestRefresh(t, a).Status)
}

// One active refresh per group: a second StartInstanceRefresh is InstanceRefreshInProgress. API Reference,
// StartInstanceRefresh.
func TestSecondStartWhileARefreshIsActiveIsInstanceRefreshInProgress(t *testing.T) {
	a, lt := refreshGroup(t, GroupSpec{Min: 1, Max: 4, Desired: 2})
	id := startRefresh(t, a, toVersion(lt, "2"), nil)
	_, err := a.AutoScaling().StartInstanceRefresh(context.Background(), &autoscaling.StartInstanceRefreshInput{AutoScalingGroupName: aws.String("g"), DesiredConfiguration: toVersion(lt, "2")})
	require.Equal(t, "InstanceRefreshInProgress", apiCode(err))
	var fault *astypes.InstanceRefreshInProgressFault
	require.ErrorAs(t, err, &fault)
	require.Contains(t, err.Error(), id)
}

// While a refresh with a desired configuration is active, UpdateAutoScalingGroup may not change the launch
// template or the mixed instances policy; other settings and refreshes without one are not affected. API
// Reference, UpdateAutoScalingGroup and StartInstanceRefresh (DesiredConfiguration).
func TestUpdateOfTheLaunchTemplateIsRefusedWhileARefreshWithADesiredConfigurationIsActive(t *testing.T) {
	update := func(a *Account, lt string) error {
		_, err := a.AutoScaling().(*AutoScalingClient).UpdateAutoScalingGroup(context.Background(), &autoscaling.UpdateAutoScalingGroupInput{AutoScalingGroupName: aws.String("g"),
			LaunchTemplate: &astypes.LaunchTemplateSpecification{LaunchTemplateId: aws.String(lt), Version: aws.String("2")}})
		return err
	}
	a, lt := refreshGroup(t, GroupSpec{Min: 1, Max: 4, Desired: 2})
	startRefresh(t, a, toVersion(lt, "2"), nil)
	require.Equal(t, "ValidationError", apiCode(update(a, lt)))
	_, err := a.AutoScaling().(*AutoScalingClient).UpdateAutoScalingGroup(context.Background(), &autoscaling.UpdateAutoScalingGroupInput{AutoScalingGroupName: aws.String("g"), MaxSize: aws.Int32(5)})
	require.NoError(t, err)

	a, lt = refreshGroup(t, GroupSpec{Min: 1, Max: 4, Desired: 2})
	startRefresh(t, a, nil, nil)
	require.NoError(t, update(a, lt))
}

// Replacements that fail (here every launch is ABANDONed at its hook's timeout) are retried for an hour, then
// the refresh fails. API Reference, StartInstanceRefresh; the hour counts from the first failed replacement,
// so a hook's wait does not count against it (docs/simulation.md).
func TestRefreshRetriesFailingReplacementsForAnHourThenFails(t *testing.T) {
	a, lt := refreshGroup(t, GroupSpec{Min: 1, Max: 4, Desired: 2, Hooks: []HookSpec{
		{Name: "launch", Transition: TransitionLaunching, HeartbeatTimeout: 10 * time.Minute, DefaultResult: ResultAbandon}}})
	startRefresh(t, a, toVersion(lt, "2"), &astypes.RefreshPreferences{MinHealthyPercentage: aws.Int32(100), MaxHealthyPercentage: aws.Int32(150), InstanceWarmup: aws.Int32(0)})
	firstFailure := start.Add(refreshPendingDelay + a.Options().BootDelay + 10*time.Minute)
	a.Advance(firstFailure.Sub(a.Clock().Now()) + 59*time.Minute)
	r := latestRefresh(t, a)
	require.Equal(t, astypes.InstanceRefreshStatusInProgress, r.Status)
	require.Greater(t, a.LaunchedInstances("g"), 2+3, "replacements are retried")
	a.Advance(2 * time.Minute)
	r = latestRefresh(t, a)
	require.Equal(t, astypes.InstanceRefreshStatusFailed, r.Status)
	require.Contains(t, aws.ToString(r.StatusReason), "1 hour")
	in, _ := serving(a.Group("g"))
	require.Equal(t, 2, in, "the old instances still serve")
}

// Scale outs during a refresh launch with the desired configuration. User Guide, "Understand the default values
// for an instance refresh" and API Reference, StartInstanceRefresh (DesiredConfiguration).
func TestScaleOutDuringARefreshLaunchesWithTheDesiredConfiguration(t *testing.T) {
	a, lt := refreshGroup(t, GroupSpec{Min: 1, Max: 6, Desired: 2})
	startRefresh(t, a, toVersion(lt, "2"), &astypes.RefreshPreferences{MinHealthyPercentage: aws.Int32(100), MaxHealthyPercentage: aws.Int32(150), InstanceWarmup: aws.Int32(600)})
	a.Advance(refreshPendingDelay)
	before := map[string]bool{}
	for _, i := range a.Group("g").Instances {
		before[i.ID] = true
	}
	require.NoError(t, a.SetDesiredCapacity("g", 3))
	var added []InstanceView
	for _, i := range a.Group("g").Instances {
		if !before[i.ID] {
			added = append(added, i)
		}
	}
	require.Len(t, added, 1)
	require.Equal(t, "2", added[0].LaunchTemplateVersion)
}

// The warm pool's instances are replaced after the InService instances. User Guide, "Use an instance refresh
// with a warm pool" (warm pool instances are replaced once the InService ones are).
func TestRefreshReplacesTheWarmPoolAfterTheInServiceInstances(t *testing.T) {
	a, lt := refreshGroup(t, GroupSpec{Min: 1, Max: 4, Desired: 2})
	require.NoError(t, a.PutWarmPool("g", WarmPoolSpec{MinSize: 1}))
	a.Advance(10 * time.Minute)
	pool := a.WarmPool("g")
	require.NotEmpty(t, pool)
	startRefresh(t, a, toVersion(lt, "2"), &astypes.RefreshPreferences{MinHealthyPercentage: aws.Int32(100), MaxHealthyPercentage: aws.Int32(150), InstanceWarmup: aws.Int32(0)})
	r := runRefresh(t, a, 2*time.Hour, nil, astypes.InstanceRefreshStatusSuccessful)
	require.Equal(t, astypes.InstanceRefreshStatusSuccessful, r.Status)
	var lastInService, firstPool time.Time
	poolIDs := map[string]bool{}
	for _, p := range pool {
		poolIDs[p.ID] = true
	}
	for _, term := range a.Terminations() {
		if poolIDs[term.InstanceID] {
			if firstPool.IsZero() {
				firstPool = term.RequestedAt
			}
		} else {
			lastInService = term.RequestedAt
		}
	}
	require.False(t, firstPool.IsZero(), "the pool's instances are replaced")
	require.False(t, firstPool.Before(lastInService), "after the InService instances")
	for _, p := range a.WarmPool("g") {
		require.Equal(t, "2", p.LaunchTemplateVersion)
	}
}

// A desired configuration on a group that selects instance types by attributes is refused. User Guide, instance
// refresh limitations (attribute-based instance type selection).
func TestDesiredConfigurationOnAnAttributeBasedGroupIsRefused(t *testing.T) {
	a, lt := refreshGroup(t, GroupSpec{Min: 1, Max: 4, Desired: 2, MixedInstances: true, InstanceRequirements: true})
	_, err := a.AutoScaling().StartInstanceRefresh(context.Background(), &autoscaling.StartInstanceRefreshInput{AutoScalingGroupName: aws.String("g"), DesiredConfiguration: toVersion(lt, "2")})
	require.Equal(t, "ValidationError", apiCode(err))
	_, err = a.AutoScaling().StartInstanceRefresh(context.Background(), &autoscaling.StartInstanceRefreshInput{AutoScalingGroupName: aws.String("g")})
	require.NoError(t, err, "a refresh without a desired configuration is taken")
}

// BakeTime holds the finished refresh in Baking, then Successful. API Reference, RefreshPreferences (BakeTime),
// InstanceRefresh (Status Baking).
func TestRefreshBakesForTheBakeTimeBeforeSuccessful(t *testing.T) {
	a, lt := refreshGroup(t, GroupSpec{Min: 1, Max: 4, Desired: 1})
	startRefresh(t, a, toVersion(lt, "2"), &astypes.RefreshPreferences{MinHealthyPercentage: aws.Int32(100), MaxHealthyPercentage: aws.Int32(200), InstanceWarmup: aws.Int32(0), BakeTime: aws.Int32(1200)})
	r := runRefresh(t, a, time.Hour, nil, astypes.InstanceRefreshStatusBaking)
	require.Equal(t, astypes.InstanceRefreshStatusBaking, r.Status)
	a.Advance(19 * time.Minute)
	require.Equal(t, astypes.InstanceRefreshStatusBaking, latestRefresh(t, a).Status)
	a.Advance(2 * time.Minute)
	require.Equal(t, astypes.InstanceRefreshStatusSuccessful, latestRefresh(t, a).Status)
}

// Preferences are validated: MinHealthyPercentage 0-100, MaxHealthyPercentage 100-200 with a Min at most 100
// below, CheckpointDelay only with CheckpointPercentages. API Reference, RefreshPreferences.
func TestRefreshPreferencesAreValidated(t *testing.T) {
	a, lt := refreshGroup(t, GroupSpec{Min: 1, Max: 4, Desired: 1})
	for name, p := range map[string]*astypes.RefreshPreferences{
		"max without min":        {MaxHealthyPercentage: aws.Int32(150)},
		"max above 200":          {MinHealthyPercentage: aws.Int32(100), MaxHealthyPercentage: aws.Int32(201)},
		"more than 100 apart":    {MinHealthyPercentage: aws.Int32(50), MaxHealthyPercentage: aws.Int32(200)},
		"min above 100":          {MinHealthyPercentage: aws.Int32(101)},
		"delay without":          {CheckpointDelay: aws.Int32(60)},
		"checkpoints descending": {CheckpointPercentages: []int32{50, 20}},
	} {
		_, err := a.AutoScaling().StartInstanceRefresh(context.Background(), &autoscaling.StartInstanceRefreshInput{AutoScalingGroupName: aws.String("g"), DesiredConfiguration: toVersion(lt, "2"), Preferences: p})
		require.Equal(t, "ValidationError", apiCode(err), name)
	}
}

// Another writer lowers desired capacity while a batch of replacements is launching: its scale in takes one
// instance, and the refresh scales none of its launches in to meet the ceiling the lower desired capacity
// gives (MaxHealthyPercentage is a percentage of it): serving capacity never drops below the new desired
// capacity. API Reference, RefreshPreferences: MaxHealthyPercentage; docs/simulation.md.
func TestScaleInDuringARefreshTakesOnlyItsOwnInstancesAndKeepsTheLaunchesInFlight(t *testing.T) {
	a, lt := refreshGroup(t, GroupSpec{Min: 1, Max: 13, Desired: 10})
	startRefresh(t, a, toVersion(lt, "2"), &astypes.RefreshPreferences{MinHealthyPercentage: aws.Int32(100), MaxHealthyPercentage: aws.Int32(130), InstanceWarmup: aws.Int32(60)})
	a.Advance(10 * time.Second)
	_, counting := serving(a.Group("g"))
	require.Equal(t, 13, counting, "three replacements launching beside ten old instances")
	minInService := 10
	a.OnChange(func(v *View) {
		in, _ := serving(v.Group("g"))
		minInService = min(minInService, in)
	})
	require.NoError(t, a.SetDesiredCapacity("g", 9))
	scaleIns := 0
	for _, term := range a.Terminations() {
		if term.Cause == CauseScaleIn {
			scaleIns++
		}
	}
	require.Equal(t, 1, scaleIns, "the scale in takes one instance, not the launches' room too")
	r := runRefresh(t, a, 2*time.Hour, nil, astypes.InstanceRefreshStatusSuccessful, astypes.InstanceRefreshStatusFailed)
	require.Equal(t, astypes.InstanceRefreshStatusSuccessful, r.Status, aws.ToString(r.StatusReason))
	require.Equal(t, 9, minInService, "never below the new desired capacity")
}
