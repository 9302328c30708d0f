package sim

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/require"
)

// runWriter plays a random writer of seed on a fresh group (min 2, max 6, desired 3) for d and returns its
// writes and the account.
func runWriter(t *testing.T, seed uint64, d time.Duration) ([]CapacityWrite, *Account) {
	t.Helper()
	a := newAccount(t)
	newGroup(t, a, GroupSpec{Name: "g", Min: 2, Max: 6, Desired: 3, LaunchTemplateVersion: "$Latest"})
	w := a.StartRandomWriter(RandomWriterSpec{Group: "g", Seed: seed})
	a.Advance(d)
	w.Stop()
	return w.Writes(), a
}

func TestRandomWriterMovesDesiredCapacityWithinItsLimitsAtRandomMoments(t *testing.T) {
	writes, a := runWriter(t, 7, 3*time.Hour)
	require.GreaterOrEqual(t, len(writes), 3*60/10, "a write every 2 to 10 minutes")
	require.LessOrEqual(t, len(writes), 3*60/2)
	ups, downs := 0, 0
	prev := writes[0].At.Add(-2 * time.Minute)
	for _, w := range writes {
		require.Equal(t, CallerAutoscaler, w.By)
		require.True(t, w.Accepted)
		gap := w.At.Sub(prev)
		require.GreaterOrEqual(t, gap, 2*time.Minute, "%s", w)
		require.LessOrEqual(t, gap, 10*time.Minute, "%s", w)
		prev = w.At
		step := w.To - w.From
		require.NotZero(t, step, "%s", w)
		require.LessOrEqual(t, max(step, -step), int32(2), "%s", w)
		require.True(t, w.To >= 2 && w.To <= 6, "within min and max: %s", w)
		if step > 0 {
			ups++
		} else {
			downs++
		}
	}
	require.Positive(t, ups)
	require.Positive(t, downs)

	// Every write is a desired capacity change by the autoscaler, and the group follows it.
	var changes []DesiredChange
	for _, ch := range a.DesiredChanges("g") {
		if ch.By == CallerAutoscaler {
			changes = append(changes, ch)
		}
	}
	require.Len(t, changes, len(writes))
	for i, ch := range changes {
		require.Equal(t, writes[i].From, ch.From)
		require.Equal(t, writes[i].To, ch.To)
		require.Equal(t, writes[i].At, ch.At)
	}
	a.Advance(5 * time.Minute)
	g := a.Group("g")
	require.Equal(t, writes[len(writes)-1].To, g.Desired)
	require.Equal(t, int(g.Desired), states(g)["InService"], "the group settled on the last write")
}

func TestRandomWriterIsReplayedBySeedAndDiffersAcrossSeeds(t *testing.T) {
	a1, _ := runWriter(t, 3, time.Hour)
	a2, _ := runWriter(t, 3, time.Hour)
	b, _ := runWriter(t, 4, time.Hour)
	require.Equal(t, a1, a2, "the same seed replays the same writes")
	require.NotEqual(t, a1, b)
}

func TestRandomWriterStopsWhenStopped(t *testing.T) {
	a := newAccount(t)
	newGroup(t, a, GroupSpec{Name: "g", Min: 1, Max: 4, Desired: 2})
	w := a.StartRandomWriter(RandomWriterSpec{Group: "g", Seed: 1, MinWait: time.Minute, MaxWait: time.Minute})
	a.Advance(90 * time.Second)
	require.Len(t, w.Writes(), 1)
	w.Stop()
	a.Advance(time.Hour)
	require.Len(t, w.Writes(), 1)
}

func TestRandomWriterScaleInChoosesByTheDefaultTerminationPolicy(t *testing.T) {
	// Amazon EC2 Auto Scaling User Guide, "Default termination policy": the Availability Zone with the most
	// instances first, then the instances of the oldest launch template version. Three old instances, one per
	// zone, and three new ones: every scale-in takes an old instance first.
	a := newAccount(t)
	lt := newGroup(t, a, GroupSpec{Name: "g", Min: 3, Max: 6, Desired: 3, LaunchTemplateVersion: "$Latest"})
	old := map[string]bool{}
	for _, i := range a.Group("g").Instances {
		old[i.ID] = true
	}
	a.CreateLaunchTemplateVersion(lt, "ami-new")
	require.NoError(t, a.SetDesiredCapacity("g", 6))
	a.Advance(3 * time.Minute)
	w := a.StartRandomWriter(RandomWriterSpec{Group: "g", Seed: 2, MinWait: time.Minute, MaxWait: 5 * time.Minute})
	var scaledIn []string
	for range 120 {
		a.Advance(time.Minute)
		scaledIn = nil
		for _, cw := range w.Writes() {
			scaledIn = append(scaledIn, cw.ScaledIn...)
		}
		if len(scaledIn) >= 3 {
			break
		}
	}
	w.Stop()
	require.GreaterOrEqual(t, len(scaledIn), 3, "%v", w.Writes())
	for _, id := range scaledIn[:3] {
		require.True(t, old[id], "the first three scale-ins take the old launch template's instances: %v", w.Writes())
	}
	for _, term := range a.Terminations() {
		require.Equal(t, CauseScaleIn, term.Cause)
	}
}

func TestOperatorTerminatesWithoutDecrementAndAutoScalingReplaces(t *testing.T) {
	a := newAccount(t)
	newGroup(t, a, GroupSpec{Name: "g", Min: 3, Max: 6, Desired: 3})
	victim := a.Group("g").Instances[1].ID
	at := a.Clock().Now().Add(10 * time.Minute)
	o := a.ScheduleOperator(OperatorSpec{Group: "g", InstanceID: victim, At: at})
	a.Advance(9 * time.Minute)
	require.False(t, o.Done())
	a.Advance(time.Minute)
	require.True(t, o.Done())

	writes := a.CapacityWrites()
	require.Len(t, writes, 1)
	w := writes[0]
	require.Equal(t, CapacityWrite{At: at, Group: "g", By: CallerOperator, Op: OpTerminateInstance, From: 3, To: 3, MaxFrom: 6, MaxTo: 6,
		InstanceID: victim, Accepted: true}, w)
	term := a.Terminations()
	require.Len(t, term, 1)
	require.Equal(t, victim, term[0].InstanceID)
	require.Equal(t, CauseOperator, term[0].Cause, "a person's call, not the agent's")
	require.Empty(t, a.DesiredChanges("g"), "desired capacity stays")
	require.Equal(t, 4, a.LaunchedInstances("g"), "Auto Scaling launches a replacement")
	a.Advance(3 * time.Minute)
	require.Equal(t, 3, states(a.Group("g"))["InService"])
}

func TestOperatorAtARandomMomentPicksAnInServiceInstance(t *testing.T) {
	pick := func(seed uint64) (time.Time, string) {
		a := newAccount(t)
		newGroup(t, a, GroupSpec{Name: "g", Min: 1, Max: 6, Desired: 4})
		from := a.Clock().Now().Add(5 * time.Minute)
		o := a.ScheduleOperator(OperatorSpec{Group: "g", From: from, To: from.Add(30 * time.Minute), Seed: seed})
		a.Advance(time.Hour)
		require.True(t, o.Done())
		w := a.CapacityWrites()[0]
		require.False(t, w.At.Before(from))
		require.False(t, w.At.After(from.Add(30*time.Minute)))
		require.False(t, w.Decrement)
		return w.At, w.InstanceID
	}
	at1, id1 := pick(5)
	at2, id2 := pick(5)
	require.Equal(t, at1, at2)
	require.Equal(t, id1, id2)
	at3, _ := pick(6)
	require.NotEqual(t, at1, at3)
}

func TestTheAgentsCallsAreCapacityWritesToo(t *testing.T) {
	ctx := context.Background()
	a := newAccount(t)
	newGroup(t, a, GroupSpec{Name: "g", Min: 2, Max: 6, Desired: 3})
	as := asClient(a)
	_, err := as.SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{AutoScalingGroupName: aws.String("g"), DesiredCapacity: aws.Int32(3)})
	require.NoError(t, err)
	_, err = as.SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{AutoScalingGroupName: aws.String("g"), DesiredCapacity: aws.Int32(9)})
	require.Error(t, err)
	id := a.Group("g").Instances[0].ID
	_, err = as.TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{InstanceId: aws.String(id),
		ShouldDecrementDesiredCapacity: aws.Bool(true)})
	require.NoError(t, err)
	_, err = as.UpdateAutoScalingGroup(ctx, &autoscaling.UpdateAutoScalingGroupInput{AutoScalingGroupName: aws.String("g"), MaxSize: aws.Int32(7)})
	require.NoError(t, err)

	writes := a.CapacityWrites()
	require.Len(t, writes, 4)
	for _, w := range writes {
		require.Equal(t, CallerAPI, w.By)
	}
	require.Equal(t, []string{OpSetDesiredCapacity, OpSetDesiredCapacity, OpTerminateInstance, OpUpdateAutoScalingGroup},
		[]string{writes[0].Op, writes[1].Op, writes[2].Op, writes[3].Op})
	require.True(t, writes[0].Accepted, "a call that leaves desired capacity as it is is still a call")
	require.Equal(t, writes[0].From, writes[0].To)
	require.False(t, writes[1].Accepted)
	require.True(t, writes[2].Decrement)
	require.Equal(t, int32(2), writes[2].To)
	require.Equal(t, int32(7), writes[3].MaxTo)
}
