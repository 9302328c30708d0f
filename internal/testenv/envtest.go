package testenv

// A real Kubernetes API for the EKS tests: kube-apiserver and etcd started by controller-runtime's envtest,
// once per test binary.
//
// # Where the binaries come from
//
// $KUBEBUILDER_ASSETS (a directory holding etcd and kube-apiserver), else
// ${XDG_CACHE_HOME:-$HOME/.cache}/patch-agent/testbin/kube-v1.34.4-etcd-v3.6.8, which `make testbin`
// (scripts/ensure-kube.sh) builds once per machine from the Go module proxy. When they are missing, tests that
// need them are skipped, or fail when $CI is set.
//
// # What runs, and what does not
//
// Only the API server and etcd: no kube-controller-manager, no scheduler, no kubelet. Tests create the
// `default` ServiceAccount of their namespaces themselves (CreateNamespace), place pods by setting
// spec.nodeName, set node and pod conditions through the status subresource, and finish pods that are
// being deleted (FinishTerminatingPods) because no kubelet does. PodDisruptionBudgets have no status unless
// a test writes it, so the API server refuses every eviction they cover with 429.
//
// A package that calls Kube ends its tests with StopKube: `func TestMain(m *testing.M) { testenv.KubeMain(m) }`.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Versions of the Kubernetes test binaries (scripts/ensure-kube.sh builds exactly these).
const (
	KubeVersion = "v1.34.4"
	EtcdVersion = "v3.6.8"
)

// kubeNotBuiltHint is the message of a skipped (or, in CI, failed) test when the binaries are missing.
const kubeNotBuiltHint = "kube-apiserver/etcd not built: run make testbin (scripts/ensure-kube.sh)"

var (
	kubeOnce sync.Once
	kubeMu   sync.Mutex
	kube     kubeState
)

type kubeState struct {
	env     *envtest.Environment
	cfg     *rest.Config
	missing string
	err     error
}

// KubeAssets returns the directory of the etcd and kube-apiserver binaries: $KUBEBUILDER_ASSETS, else the
// per-machine cache directory. missing says what is absent ("" when both binaries are there).
func KubeAssets() (dir, missing string) {
	dir = os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache")
		}
		dir = filepath.Join(cache, "patch-agent", "testbin", "kube-"+KubeVersion+"-etcd-"+EtcdVersion)
	}
	for _, bin := range []string{"etcd", "kube-apiserver"} {
		if st, err := os.Stat(filepath.Join(dir, bin)); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return dir, fmt.Sprintf("%s: %s missing in %s", kubeNotBuiltHint, bin, dir)
		}
	}
	return dir, ""
}

// Kube returns the client configuration of a kube-apiserver (with etcd) started for this test binary on
// first use (~5 s) and shared by its tests, which isolate themselves by namespace and unique node names. The
// configuration has client-side rate limits high enough not to slow tests down. It skips the test when the
// binaries are missing (fails when $CI is set) and fails it when the control plane does not start.
func Kube(t testing.TB) *rest.Config {
	t.Helper()
	kubeOnce.Do(func() {
		kubeMu.Lock()
		defer kubeMu.Unlock()
		kube = startKube()
	})
	kubeMu.Lock()
	st := kube
	kubeMu.Unlock()
	switch {
	case st.err != nil:
		t.Fatalf("envtest: %v", st.err)
	case st.missing != "" && inCI():
		t.Fatalf("%s (CI is set, so tests that need a Kubernetes API fail instead of skipping)", st.missing)
	case st.missing != "":
		t.Skip(st.missing)
	}
	cfg := rest.CopyConfig(st.cfg)
	cfg.QPS, cfg.Burst = 1000, 2000
	return cfg
}

func startKube() kubeState {
	dir, missing := KubeAssets()
	if missing != "" {
		return kubeState{missing: missing}
	}
	env := &envtest.Environment{BinaryAssetsDirectory: dir, ControlPlaneStartTimeout: time.Minute, ControlPlaneStopTimeout: 30 * time.Second}
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		return kubeState{err: fmt.Errorf("starting kube-apiserver and etcd from %s: %w", dir, err)}
	}
	return kubeState{env: env, cfg: cfg}
}

// StopKube stops the control plane Kube started, if any.
func StopKube() {
	kubeMu.Lock()
	defer kubeMu.Unlock()
	if kube.env != nil {
		_ = kube.env.Stop()
		kube.env = nil
	}
}

// KubeMain runs the tests of a package that uses Kube, then StopKube, and exits with the tests' code.
func KubeMain(m *testing.M) {
	code := m.Run()
	StopKube()
	os.Exit(code)
}

// KubeClient returns a clientset on Kube's API server.
func KubeClient(t testing.TB) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(Kube(t))
	if err != nil {
		t.Fatalf("clientset: %v", err)
	}
	return cs
}

// CreateNamespace creates a namespace named after the test (UniqueName, lowercased) with its `default` ServiceAccount
// (no controller-manager creates it here, and pods cannot be created without it) and returns its name.
func CreateNamespace(t testing.TB, cs kubernetes.Interface) string {
	t.Helper()
	ctx := context.Background()
	name := strings.ToLower(UniqueName(t, "ns")) // an RFC 1123 label: lowercase, at most 63 characters
	if len(name) > 63 {
		name = strings.TrimRight(name[:54], "-") + name[len(name)-9:] // keep "-" and the random suffix
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: name}}
	if _, err := cs.CoreV1().ServiceAccounts(name).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating ServiceAccount %s/default: %v", name, err)
	}
	return name
}

// FinishTerminatingPods deletes with grace period 0 every pod of the namespace that is being deleted (what a
// kubelet does once the containers stopped) and returns how many it finished.
func FinishTerminatingPods(ctx context.Context, cs kubernetes.Interface, namespace string) (int, error) {
	pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	zero := int64(0)
	n := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			continue
		}
		err := cs.CoreV1().Pods(namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if err != nil && !apierrors.IsNotFound(err) {
			return n, err
		}
		n++
	}
	return n, nil
}
