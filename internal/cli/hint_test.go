package cli

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestShellQuoteQuotesOnlyWhatNeedsIt(t *testing.T) {
	require.Equal(t, "eu-west-1", ShellQuote("eu-west-1"))
	require.Equal(t, "https://sqs.eu-west-1.amazonaws.com/111122223333/q", ShellQuote("https://sqs.eu-west-1.amazonaws.com/111122223333/q"))
	require.Equal(t, "'a b'", ShellQuote("a b"))
	require.Equal(t, `'it'\''s'`, ShellQuote("it's"))
	require.Equal(t, "''", ShellQuote(""))
}
