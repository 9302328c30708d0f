package model

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestUpdateConfigWordsPreferThePercentageAndFallBackToEKSsDefault(t *testing.T) {
	require.Equal(t, "maxUnavailablePercentage 25", UpdateConfigWords(2, 25))
	require.Equal(t, "maxUnavailable 2", UpdateConfigWords(2, 0))
	require.Equal(t, "maxUnavailable 1, EKS's default", UpdateConfigWords(0, 0))
}
