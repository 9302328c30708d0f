package eksdrain_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/yaml"

	"github.com/patch-agent/patch-agent/internal/eksdrain"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/testenv"
)

// documentedRBAC returns the ClusterRole and ClusterRoleBinding of docs/eks-access.md.
func documentedRBAC(t *testing.T) (*rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding) {
	t.Helper()
	doc, err := os.ReadFile("../../docs/eks-access.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(doc), "```yaml\n# patch-agent-rbac.yaml")
	require.True(t, ok, "docs/eks-access.md has the patch-agent-rbac.yaml block")
	block, _, ok := strings.Cut(rest, "```")
	require.True(t, ok)
	_, block, _ = strings.Cut(block, "\n") // the rest of the comment line
	parts := strings.Split(block, "\n---\n")
	require.Len(t, parts, 2)
	var role rbacv1.ClusterRole
	require.NoError(t, yaml.UnmarshalStrict([]byte(parts[0]), &role))
	var binding rbacv1.ClusterRoleBinding
	require.NoError(t, yaml.UnmarshalStrict([]byte(parts[1]), &binding))
	require.Equal(t, "ClusterRole", role.Kind)
	require.Equal(t, "ClusterRoleBinding", binding.Kind)
	return &role, &binding
}

func TestTheDocumentedClusterRoleIsEnoughToDrain(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	k := newKube(t, clk.Now)
	ctx := context.Background()
	role, binding := documentedRBAC(t)
	if _, err := k.cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	if _, err := k.cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}

	// The agent, as EKS maps its IAM role through an access entry with Kubernetes group patch-agent.
	cfg := testenv.Kube(t)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "arn:aws:iam::111122223333:role/patch-agent", Groups: []string{"patch-agent"}}
	agentCS, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)

	old := k.addNode(k.nodeName("old"), "aws:///us-east-1a/"+idA, true)
	k.addNode(k.nodeName("new"), "aws:///us-east-1b/"+idB, true)
	ds := k.addDaemonSet("node-agent")
	k.addPod("web-1", old.Name, ownedBy("ReplicaSet", "web-7c9d5b8f6d", "3f0c7c2e-0000-4000-8000-000000000004"), labeled("app", "web"))
	k.addPod("node-agent-old", old.Name, ownedBy("DaemonSet", "node-agent", ds), labeled("app", "node-agent"))

	_, err = agentCS.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err, "pods list is granted")
	err = agentCS.CoreV1().Pods(k.ns).Delete(ctx, "web-1", metav1.DeleteOptions{})
	require.True(t, apierrors.IsForbidden(err), "the agent may not delete pods, only evict them: %v", err)

	p := providers.NewEKSPlatform(staticClients{agentCS}, eksdrain.Options{NodeSelector: "test=" + k.label, Clock: clk,
		Backoff: noJitter, RequireDaemonSetsReady: true})
	nodes, err := p.Observe(ctx, "c")
	require.NoError(t, err)
	require.True(t, nodes[idB].Healthy)
	require.NoError(t, p.StartDrain(ctx, "c", idA))
	prog, err := p.DrainStatus(ctx, "c", idA)
	require.NoError(t, err)
	require.Equal(t, 1, prog.Remaining, prog.Detail)
	require.Contains(t, prog.Detail, "1 shutting down", "evicted, and the DaemonSet pod recognised (daemonsets get)")
	k.finishTerminating()
	prog, err = p.DrainStatus(ctx, "c", idA)
	require.NoError(t, err)
	require.True(t, prog.Drained, prog.Detail)
	require.NoError(t, p.Undrain(ctx, "c", idA))
	nodes, err = p.Observe(ctx, "c")
	require.NoError(t, err)
	require.False(t, nodes[idA].Draining)
}
