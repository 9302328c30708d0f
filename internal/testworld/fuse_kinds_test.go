package testworld

import (
	"context"
	"errors"
	"path"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

// fusedOp is the operation a method of a fused interface is classified under in fuseKinds: the service of its
// AWS input type (*autoscaling.XInput: "autoscaling"), or the interface's package ("state", "model").
func fusedOp(iface reflect.Type, m reflect.Method) string {
	pkg := iface.PkgPath()
	if m.Type.NumIn() > 1 && m.Type.In(1).Kind() == reflect.Pointer && m.Type.In(1).Elem().PkgPath() != pkg {
		pkg = m.Type.In(1).Elem().PkgPath()
	}
	return path.Base(pkg) + ":" + m.Name
}

// callZero calls m of v with a background context and zero values, and returns its error, or errPassed when the
// call reached the wrapped implementation (nil here).
func callZero(v reflect.Value, m reflect.Method) (err error) {
	defer func() {
		if recover() != nil {
			err = errPassed
		}
	}()
	in := []reflect.Value{reflect.ValueOf(context.Background())}
	for i := 1; i < m.Type.NumIn(); i++ {
		in = append(in, reflect.Zero(m.Type.In(i)))
	}
	if m.Type.IsVariadic() {
		in = in[:len(in)-1]
	}
	out := v.MethodByName(m.Name).Call(in)
	err, _ = out[len(out)-1].Interface().(error)
	return err
}

var errPassed = errors.New("reached the wrapped implementation")

// Every call of the fused store, clients and platform is classified in fuseKinds, and does what its kind says
// once the fuse blew: reads and writes fail with ErrCrashed, the others reach the wrapped implementation.
func TestFuseKindsClassifyEveryCallOfTheFusedInterfaces(t *testing.T) {
	f := &Fuse{}
	f.Blow()
	wrappers := map[reflect.Type]any{
		reflect.TypeFor[state.Store]():          fusedStore{f: f},
		reflect.TypeFor[model.Platform]():       fusedPlatform{f: f},
		reflect.TypeFor[awsapi.AutoScaling]():   fusedAutoScaling{f: f},
		reflect.TypeFor[awsapi.EC2]():           fusedEC2{f: f},
		reflect.TypeFor[awsapi.ECS]():           fusedECS{f: f},
		reflect.TypeFor[awsapi.SQS]():           fusedSQS{f: f},
		reflect.TypeFor[awsapi.EKSNodegroups](): fusedEKSNodegroups{f: f},
	}
	seen := map[string]bool{}
	for iface, w := range wrappers {
		v := reflect.ValueOf(w)
		require.Equal(t, iface.NumMethod(), v.NumMethod(), "%s: the wrapper's methods are the interface's", iface)
		for i := range iface.NumMethod() {
			m := iface.Method(i)
			op := fusedOp(iface, m)
			kind, ok := fuseKinds[op]
			require.True(t, ok, "fuseKinds does not say whether %s is a read, a write or neither", op)
			seen[op] = true
			err := callZero(v, m)
			if kind == fusePass {
				require.ErrorIs(t, err, errPassed, op)
			} else {
				require.ErrorIs(t, err, ErrCrashed, op)
			}
		}
	}
	for op := range fuseKinds {
		require.True(t, seen[op], "fuseKinds names %s, which no fused interface has", op)
	}
}

// A write that succeeds is an effect and blows the fuse At it; reads and untouched calls are none.
func TestFuseCountsOnlyWritesAsEffects(t *testing.T) {
	ctx := context.Background()
	store := state.NewMemory()
	f := &Fuse{At: 2}
	s := fusedStore{api: store, f: f}
	_, err := s.PutRollout(ctx, state.Rollout{Group: "g"})
	require.NoError(t, err)
	_, err = s.GetRollout(ctx, "g")
	require.NoError(t, err)
	_, err = s.ListRollouts(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, f.Effects())
	require.NoError(t, s.PutDrainMark(ctx, state.DrainMark{InstanceID: "i-1"}))
	require.True(t, f.Blown())
	_, err = s.GetRollout(ctx, "g")
	require.ErrorIs(t, err, ErrCrashed)
	_, err = s.ListRollouts(ctx)
	require.NoError(t, err, "a call neither read nor write goes through after the crash")
}

// OnWrite sees every rollout record written and OnHook every lifecycle action record, and either may blow the
// fuse right after the write.
func TestFuseShowsWrittenRecordsToOnWriteAndOnHook(t *testing.T) {
	ctx := context.Background()
	var rollouts, hooks int
	f := &Fuse{
		OnWrite: func(state.Rollout) bool { rollouts++; return false },
		OnHook:  func(state.Hook) bool { hooks++; return true },
	}
	s := fusedStore{api: state.NewMemory(), f: f}
	_, err := s.PutRolloutWithHistory(ctx, state.Rollout{Group: "g"}, nil)
	require.NoError(t, err)
	require.False(t, f.Blown())
	_, err = s.PutHook(ctx, state.Hook{Token: "t", Group: "g"})
	require.NoError(t, err)
	require.Equal(t, []int{1, 1}, []int{rollouts, hooks})
	require.True(t, f.Blown())
}
