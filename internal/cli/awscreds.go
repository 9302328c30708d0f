package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/patch-agent/patch-agent/internal/config"
)

// EnvProfile is the AWS CLI's and the SDK's variable naming the profile of ~/.aws/config to use.
const EnvProfile = "AWS_PROFILE"

// AddProfileFlag registers --profile: the named profile of ~/.aws/config and ~/.aws/credentials, as the aws
// CLI takes it; empty, AWS_PROFILE or the default chain.
func AddProfileFlag(fs *pflag.FlagSet, profile *string) {
	fs.StringVar(profile, "profile", "", "named profile of ~/.aws/config to take credentials and region from, as the aws CLI does (default: env "+EnvProfile+", else the default credential chain)")
}

// LoadProfile loads the AWS configuration of profile ("" : AWS_PROFILE or the default chain) with opts, as the
// SDK resolves it (awsconfig.LoadDefaultConfig): a profile neither ~/.aws/config nor ~/.aws/credentials names is
// an error that says where to look.
func LoadProfile(ctx context.Context, profile string, opts ...func(*awsconfig.LoadOptions) error) (aws.Config, error) {
	if profile != "" {
		opts = append(opts, awsconfig.WithSharedConfigProfile(profile))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		var missing awsconfig.SharedConfigProfileNotExistError
		if errors.As(err, &missing) {
			return aws.Config{}, fmt.Errorf("AWS profile %q is in neither ~/.aws/config nor ~/.aws/credentials: check --profile (or %s); `aws configure list-profiles` lists them", missing.Profile, EnvProfile)
		}
		return aws.Config{}, fmt.Errorf("loading AWS configuration: %w", err)
	}
	return cfg, nil
}

// LoadAWSConfig loads the AWS configuration of profile ("" : AWS_PROFILE or the default chain) in region (""
// : the profile's or AWS_REGION) with the standard retryer at maxAttempts (0: the SDK's default), and
// resolves the credentials once, so that a missing credential is reported as what to set — the SDK would
// report the raw error of its whole provider chain at the first call. noRegion is the error when no region
// is known (each command says what the region is for).
func LoadAWSConfig(ctx context.Context, profile, region string, maxAttempts int, noRegion error) (aws.Config, error) {
	opts := []func(*awsconfig.LoadOptions) error{awsconfig.WithRegion(region), QuietSDK,
		awsconfig.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				if maxAttempts > 0 {
					o.MaxAttempts = maxAttempts
				}
			})
		})}
	cfg, err := LoadProfile(ctx, profile, opts...)
	if err != nil {
		return aws.Config{}, err
	}
	if cfg.Region == "" {
		return aws.Config{}, noRegion
	}
	if _, err := cfg.Credentials.Retrieve(ctx); err != nil {
		return aws.Config{}, credentialsError(profile, err)
	}
	return cfg, nil
}

// credentialsError says what to set when no credentials could be found, as the aws CLI does ("Unable to
// locate credentials"), instead of the provider chain's raw error.
func credentialsError(profile string, err error) error {
	if profile != "" || strings.TrimSpace(os.Getenv(EnvProfile)) != "" {
		p := profile
		if p == "" {
			p = os.Getenv(EnvProfile)
		}
		return fmt.Errorf("the credentials of AWS profile %q could not be loaded: %s. For an IAM Identity Center profile run `aws sso login --profile %s`; "+
			"otherwise check the profile in ~/.aws/config", p, Innermost(err), p)
	}
	return errors.New("unable to locate AWS credentials: pass --profile NAME (or set " + EnvProfile + ") for a profile of ~/.aws/config " +
		"(`aws configure sso` or `aws configure` writes one), or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN " +
		"for temporary credentials); on EC2, ECS or Lambda the instance or task role is used")
}

// Innermost is the message of the deepest wrapped error: the cause, without the chain's prefixes.
func Innermost(err error) string {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err.Error()
		}
		err = next
	}
}

// regionsValue is --region where it may be given more than once (the organization-wide commands run in each
// region given): the first value is also the single region of the one-account form.
type regionsValue struct {
	single *string
	all    *[]string
	given  bool
}

func NewRegionsValue(single *string, all *[]string) *regionsValue {
	if *single != "" {
		*all = []string{*single}
	}
	return &regionsValue{single: single, all: all}
}

func (v *regionsValue) String() string { return *v.single }
func (v *regionsValue) Type() string   { return "region" }

// GetSlice returns every region given, for a hint that repeats the flag (pasteable).
func (v *regionsValue) GetSlice() []string {
	if len(*v.all) == 0 {
		return []string{*v.single}
	}
	return *v.all
}

func (v *regionsValue) Set(s string) error {
	for _, r := range strings.Split(s, ",") {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		if !v.given {
			*v.all, *v.single, v.given = nil, r, true
		}
		*v.all = append(*v.all, r)
	}
	return nil
}

// OneRegion refuses more than one --region in the one-account form of cmd.
func OneRegion(cmd *cobra.Command, regions []string) error {
	if len(regions) > 1 {
		return Usage(cmd, fmt.Errorf("--region is given %d times: more than one region needs --organization or --accounts FILE", len(regions)))
	}
	return nil
}

// RegionRequired is the error of a command that needs a region and has none; what says what the region is
// for. It is a usage error of the command that returns it (MarkUsageErrors): a hint names the command's --help.
func RegionRequired(what string) error { return missingRegionError{what: what} }

// missingRegionError is RegionRequired's error.
type missingRegionError struct{ what string }

func (e missingRegionError) Error() string {
	return fmt.Sprintf("--region (or %s, or the region of the --profile) is required: %s", config.EnvRegion, e.what)
}

// profileKey carries --profile of the audit command to its AWS environment (AuditEnv.connect).
type profileKey struct{}

func WithProfile(ctx context.Context, profile string) context.Context {
	return context.WithValue(ctx, profileKey{}, profile)
}

func ProfileFrom(ctx context.Context) string {
	p, _ := ctx.Value(profileKey{}).(string)
	return p
}
