package sim

import (
	"context"
	"path"
	"reflect"
	"testing"

	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"
)

// wrappedInterfaces returns the wrapping methods of f (Faults.AutoScaling ...) by the interface each wraps:
// every method of *Faults that takes an interface value and returns the same interface.
func wrappedInterfaces(f *Faults) map[reflect.Type]reflect.Value {
	out := map[reflect.Type]reflect.Value{}
	v := reflect.ValueOf(f)
	for i := range v.NumMethod() {
		m := v.Method(i)
		t := m.Type()
		if t.NumIn() == 1 && t.NumOut() == 1 && t.In(0).Kind() == reflect.Interface && t.In(0) == t.Out(0) {
			out[t.In(0)] = m
		}
	}
	return out
}

// opName is the operation a method of an AWS interface is counted under: the service of its input type
// (*autoscaling.XInput: "autoscaling") and the method's name.
func opName(m reflect.Method) string {
	return path.Base(m.Type.In(1).Elem().PkgPath()) + ":" + m.Name
}

func methodNames(t reflect.Type) []string {
	var out []string
	for i := range t.NumMethod() {
		out = append(out, t.Method(i).Name)
	}
	return out
}

// Every method of every interface Faults wraps goes through the injector, under its operation's name: the
// wrapper's method set is the interface's, and an "every call fails" rule fails each call before it reaches
// the wrapped client (nil here) and counts it.
func TestFaultsWrapEveryMethodOfTheInterfaces(t *testing.T) {
	f := NewFaults(1, nil, FaultRule{Op: "*", Every: 1, Codes: []string{"AccessDenied"}})
	wraps := wrappedInterfaces(f)
	require.Len(t, wraps, 13, "AutoScaling, EC2, EC2InstanceTypes, ECS, SSM, SQS, OperatorQueue, CloudWatch, EventBridge, EKS, EKSUpgrade, EKSNodegroups, STS")
	ops := map[string]bool{}
	for iface, wrap := range wraps {
		w := wrap.Call([]reflect.Value{reflect.Zero(iface)})[0].Elem()
		require.Equal(t, methodNames(iface), methodNames(w.Type()), "%s: the wrapper's methods are the interface's", iface)
		for i := range iface.NumMethod() {
			m := iface.Method(i)
			op := opName(m)
			ops[op] = true
			in := []reflect.Value{reflect.ValueOf(context.Background()), reflect.Zero(m.Type.In(1))}
			out := w.MethodByName(m.Name).Call(in)
			err, _ := out[1].Interface().(error)
			var api smithy.APIError
			require.ErrorAs(t, err, &api, "%s.%s", iface, m.Name)
			require.Equal(t, "AccessDenied", api.ErrorCode())
			require.Positive(t, f.Stats().Calls[op], "%s.%s is counted as %s", iface, m.Name, op)
		}
	}
	for op := range mutatingOps {
		require.True(t, ops[op], "mutatingOps names %s, which no wrapped interface has", op)
	}
}
