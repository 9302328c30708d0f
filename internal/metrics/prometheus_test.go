package metrics_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/metrics"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

func TestPrometheusExposition(t *testing.T) {
	reg := metrics.NewRegistry(nil)
	reg.TargetObserved(model.Target{Group: `we"ird\asg`, Platform: platform}, model.GroupView{Instances: []model.InstanceView{
		{ID: "i-1", ImageID: "ami-1", LifecycleState: "InService"}}}, state.Rollout{}, &model.ResolvedAMI{ImageID: "ami-1"})
	retire(reg, 0)
	retire(reg, 1)
	var st events.Stats
	st.Processed.Store(12)
	reg.Consumer = func() *events.Stats { return &st }

	srv := httptest.NewServer(reg.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, metrics.PrometheusContentType, resp.Header.Get("Content-Type"))
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	text := string(body)

	for _, want := range []string{
		"# TYPE patch_agent_group_instances gauge\n",
		`patch_agent_group_instances{group="we\"ird\\asg",platform="ecs"} 1` + "\n",
		`patch_agent_group_instances_outdated{group="we\"ird\\asg",platform="ecs"} 0` + "\n",
		"# TYPE patch_agent_replacements_succeeded_total counter\n",
		`patch_agent_replacements_succeeded_total{group="web-asg",platform="ecs"} 2` + "\n",
		"# TYPE patch_agent_messages_processed_total counter\npatch_agent_messages_processed_total 12\n",
		"patch_agent_heartbeat 1\n",
	} {
		require.Contains(t, text, want)
	}
	// Every line is a comment or "name{labels} value".
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if strings.HasPrefix(line, "# HELP ") || strings.HasPrefix(line, "# TYPE ") {
			continue
		}
		require.Regexp(t, `^patch_agent_[a-z_]+(\{group="(\\.|[^"\\])*",platform="[a-z]*"\})? -?[0-9.e+]+$`, line)
	}

	post, err := http.Post(srv.URL, "text/plain", nil)
	require.NoError(t, err)
	post.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, post.StatusCode)
}
