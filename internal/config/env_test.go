package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/config"
)

// The agent's stack sets these from its parameters; empty keeps the default, a bad value fails Validate.
func TestTimeoutsAndClusterBudgetTakeTheirDefaultsFromTheEnvironment(t *testing.T) {
	t.Setenv(config.EnvHealthTimeout, "")
	t.Setenv(config.EnvDrainTimeout, "")
	t.Setenv(config.EnvClusterBudget, "")
	d := config.Default()
	t.Setenv(config.EnvHealthTimeout, "25m")
	t.Setenv(config.EnvDrainTimeout, "45m")
	t.Setenv(config.EnvClusterBudget, "3")
	c := config.Default()
	require.Equal(t, 25*time.Minute, c.HealthTimeout)
	require.Equal(t, 45*time.Minute, c.DrainTimeout)
	require.Equal(t, 3, c.ClusterBudget)
	require.NotEqual(t, c.ClusterBudget, d.ClusterBudget)
	t.Setenv(config.EnvClusterBudget, "two")
	require.Equal(t, -1, config.Default().ClusterBudget, "Validate refuses it")
}
