package operate

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/cli"
)

type fixedCaller string

func (f fixedCaller) GetCallerIdentity(context.Context, *sts.GetCallerIdentityInput, ...func(*sts.Options)) (*sts.GetCallerIdentityOutput, error) {
	return &sts.GetCallerIdentityOutput{Arn: aws.String(string(f))}, nil
}

// The two-person rule cannot be bypassed with --who: with an AWS store, every run of approve and eks upgrade
// records the STS caller, whatever --who says and with or without --two-person. Were STS asked only under
// --two-person, the requester's second run without the flag (as the docs' "run again with --approve" says)
// would approve her own plan as the local user name.
func TestActingIdentityWithAnAWSStoreIsAlwaysTheSTSCallerNeverTheLocalWho(t *testing.T) {
	const alice = "arn:aws:sts::111122223333:assumed-role/Admin/alice"
	saved := newSTS
	t.Cleanup(func() { newSTS = saved })
	newSTS = func(aws.Config) awsapi.STS { return fixedCaller(alice) }

	for _, tc := range []struct {
		name  string
		args  []string
		store *cli.OpenedStore
		want  string
	}{
		{"aws store, --who given", []string{"--who", "root@vm"}, &cli.OpenedStore{AWS: &aws.Config{}}, alice},
		{"aws store, no --who", nil, &cli.OpenedStore{AWS: &aws.Config{}}, alice},
		{"state file, --who given", []string{"--who", "root@vm"}, &cli.OpenedStore{}, "root@vm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var who string
			cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
			cmd.Flags().StringVar(&who, "who", "", "")
			require.NoError(t, cmd.ParseFlags(tc.args))
			cmd.SetContext(context.Background())
			got, err := actingIdentity(cmd, tc.store, who)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}
