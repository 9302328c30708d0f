package events

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// FuzzParse checks that Parse never panics and that every body yields either a valid event or an error
// wrapping ErrMalformed. The seeds are every fixture in testdata plus a few malformed bodies.
func FuzzParse(f *testing.F) {
	for _, file := range fixtureFiles(f) {
		body, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(body)
	}
	for _, s := range []string{"", "null", "[]", `{"Type":"Notification","TopicArn":"t"}`, `{"LifecycleHookName":"h"}`,
		`{"lifecycleHookName":"h","Event":"autoscaling:TEST_NOTIFICATION"}`,
		`{"detail-type":"Scheduled Event","source":"aws.events","detail":[]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := Parse(body)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %q does not wrap ErrMalformed", err)
			}
			if ev != (Event{}) {
				t.Fatalf("error %q with a non-zero event %+v", err, ev)
			}
			return
		}
		if !validKinds[ev.Kind] {
			t.Fatalf("kind %q is not valid", ev.Kind)
		}
		if ev.Envelope == "" {
			t.Fatal("no envelope")
		}
		switch ev.Kind {
		case KindLifecycleAction:
			l := ev.Lifecycle
			if l == nil || l.Token == "" || l.InstanceID == "" || l.GroupName == "" ||
				(l.Transition != TransitionLaunching && l.Transition != TransitionTerminating) {
				t.Fatalf("incomplete lifecycle action %+v", l)
			}
			if ev.Group != l.GroupName {
				t.Fatalf("group %q, lifecycle action group %q", ev.Group, l.GroupName)
			}
			if !groupNameOK(l.GroupName) {
				t.Fatalf("lifecycle action for group %q, a name Auto Scaling does not give", l.GroupName)
			}
		case KindParameterChange:
			if p := ev.Parameter; p == nil || p.Name == "" || p.Operation == "" {
				t.Fatalf("incomplete parameter change %+v", p)
			}
		case KindUnknown, KindTestNotification:
			if ev.Reason == "" {
				t.Fatalf("%s without a reason", ev.Kind)
			}
		}
		if ev.Kind != KindLifecycleAction && ev.Lifecycle != nil || ev.Kind != KindParameterChange && ev.Parameter != nil {
			t.Fatalf("kind %s carries fields of another kind: %+v", ev.Kind, ev)
		}
		if d := ev.Describe(); d == "" || strings.ContainsAny(d, "\r\n") {
			t.Fatalf("Describe() = %q", d)
		}
	})
}
