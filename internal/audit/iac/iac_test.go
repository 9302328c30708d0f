package iac

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/audit"
	"github.com/patch-agent/patch-agent/internal/audit/fleet"
	"github.com/patch-agent/patch-agent/internal/awsapi"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

func fixtures() fs.FS { return os.DirFS(filepath.Join("testdata", "fixtures")) }

func scanFixtures(t *testing.T, s Scanner) *Report {
	t.Helper()
	if s.FS == nil {
		s.FS = fixtures()
	}
	r, err := s.Scan(context.Background(), []string{"."})
	require.NoError(t, err)
	return r
}

// nonFindings are the AMI ids written in the fixtures that must not be reported, and why.
var nonFindings = map[string]string{
	"terraform/prod/main.tf:1 ami-0deadbeefdeadbeef":             "a comment",
	"terraform/prod/main.tf:22 ami-0ccccccccccccccc3":            "the default of a variable nothing uses",
	"terraform/prod/main.tf:35 ami-0aaaaaaaaaaaaaaa1":            "a tag of the launch template, not its image_id",
	"terraform/prod/main.tf:56 ami-0bbbbbbbbbbbbbbb2":            "aws_ami_copy's source: a resource that launches no instance",
	"terraform/prod/prod.tfvars:2 ami-0dddddddddddddd04":         "a tfvars value of a variable the module does not declare",
	"terraform/modules/asg/main.tf:7 ami-0fffffffffffffff5":      "a module variable's default its only caller overrides",
	"terraform/eks/main.tf:3 ami-0e586000000000001":              "a map entry the index never selects (arm64 is selected)",
	"terraform/broken/main.tf:2 ami-0eeeeeeeeeeeeeee6":           "a file that does not parse: a warning with its line",
	"terragrunt/modules/lt/main.tf:4 ami-0fffffffffffffff6":      "a module variable's default the terragrunt inputs override",
	"cloudformation/stack.yaml:2 ami-0abcabcabcabcabc1":          "the template's Description",
	"cloudformation/stack.yaml:13 ami-0ec86000000000004":         "a mapping entry FindInMap never selects (arm is selected)",
	"cloudformation/stack.yaml:16 ami-0fedcba9876543210":         "a mapping entry FindInMap never selects (arm is selected)",
	"cloudformation/stack.yaml:55 ami-0ec86000000000006":         "the value of an SSM parameter the stack writes: the golden-AMI parameter itself",
	"cloudformation/nested/workers.yaml:5 ami-0fffffffffffffff7": "a nested stack parameter's default its parent overrides",
	"cloudformation/template.json:12 ami-0eca6000000000006":      "a mapping entry FindInMap never selects (prod is selected)",
	"cloudformation/broken.yaml:6 ami-0eeeeeeeeeeeeeee7":         "a template that does not parse: a warning with its line",
}

// TestEveryAMIInTheFixturesIsReportedAtItsLineOrAnIntendedNonFinding reads every line of every fixture: each
// AMI id written there is either a finding at that file and line, or listed in nonFindings with the reason.
func TestEveryAMIInTheFixturesIsReportedAtItsLineOrAnIntendedNonFinding(t *testing.T) {
	r := scanFixtures(t, Scanner{})
	reported := map[string]bool{}
	for _, f := range r.Findings {
		reported[fmt.Sprintf("%s:%d %s", f.File, f.Line, f.ImageID)] = true
	}
	written := map[string]bool{}
	require.NoError(t, fs.WalkDir(fixtures(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fixtures(), p)
		require.NoError(t, err)
		sc := bufio.NewScanner(bytes.NewReader(b))
		for n := 1; sc.Scan(); n++ {
			for _, id := range AMIPattern.FindAllString(sc.Text(), -1) {
				written[fmt.Sprintf("%s:%d %s", p, n, id)] = true
			}
		}
		return nil
	}))
	require.Greater(t, len(written), 40, "the fixtures cover every shape")
	for k := range written {
		why, intended := nonFindings[k]
		if reported[k] {
			require.False(t, intended, "%s is reported but listed as a non-finding (%s)", k, why)
			continue
		}
		require.True(t, intended, "%s is neither reported nor listed as an intended non-finding", k)
	}
	for k := range reported {
		require.True(t, written[k], "%s is reported but not written there", k)
	}
	for k, why := range nonFindings {
		if why != "" {
			require.True(t, written[k], "non-finding %s is not in the fixtures", k)
		}
	}
}

// find returns the findings at file:line.
func find(r *Report, at string) []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if fmt.Sprintf("%s:%d", f.File, f.Line) == at {
			out = append(out, f)
		}
	}
	return out
}

func TestEachShapeNamesTheResourceAndThePathTheAMITakes(t *testing.T) {
	r := scanFixtures(t, Scanner{})
	for _, tc := range []struct{ at, resource, attribute, via, note string }{
		{"terraform/prod/main.tf:10", "aws_launch_template.orders", "image_id", "var.ami_id default", ""},
		{"terraform/prod/prod.tfvars:1", "aws_launch_template.orders", "image_id", "var.ami_id in prod.tfvars", ""},
		{"terraform/prod/envs/staging.tfvars:1", "aws_launch_template.orders", "image_id", "var.ami_id in staging.tfvars", ""},
		{"terraform/prod/main.tf:16", "aws_launch_template.orders_arm", "image_id", "local.region_ami > var.amis default", ""},
		{"terraform/prod/regions.auto.tfvars.json:4", "aws_launch_template.orders_arm", "image_id", "local.region_ami > var.amis in regions.auto.tfvars.json", ""},
		{"terraform/prod/main.tf:27", "aws_instance.bastion", "ami", "local.bastion_ami", ""},
		{"terraform/prod/main.tf:50", "aws_launch_configuration.legacy", "image_id", "literal", ""},
		{"terraform/prod/main.tf:88", "module.workers.aws_launch_template.this", "image_id", "var.ami_id from module.workers", ""},
		{"terraform/prod/main.tf:96", "module.eks", "eks_managed_node_groups", "literal", "module source terraform-aws-modules/eks/aws not followed"},
		{"terraform/json/main.tf.json:5", "aws_launch_template.nodes", "image_id", "var.node_ami default", ""},
		{"terraform/json/main.tf.json:17", "aws_instance.jump", "ami", "literal", ""},
		{"terraform/eks/main.tf:4", "aws_launch_template.nodes", "image_id", "local.node_ami > var.eks_amis default", ""},
		{"terragrunt/live/prod/asg/terragrunt.hcl:6", "terragrunt:terragrunt/live/prod/asg aws_launch_template.this", "image_id",
			"var.image_id from terragrunt:terragrunt/live/prod/asg inputs > local.ami", ""},
		{"terragrunt/live/prod/remote/terragrunt.hcl:7", "terragrunt:terragrunt/live/prod/remote", "inputs.ami_id", "literal",
			"source git::https://github.com/acme/infra-modules.git//asg?ref=v1.4.0 not followed"},
		{"cloudformation/stack.yaml:14", "ArmLaunchTemplate", "ImageId", "!FindInMap RegionMap", ""},
		{"cloudformation/stack.yaml:33", "Bastion", "ImageId", "literal", ""},
		{"cloudformation/stack.yaml:61", "Workers/NodeTemplate", "ImageId", "parameter WorkerAmi from stack Workers", ""},
		{"cloudformation/stack.yaml:67", "Remote", "Parameters.NodeAmi", "literal", "nested stack template not followed"},
		{"cloudformation/template.json:6", "Template", "ImageId", "parameter ImageParam default", ""},
		{"cloudformation/template.json:11", "Template", "ImageId", "!FindInMap Images", ""},
		{"cdk/cdk.out/AppStack.template.json:13", "AppStack/Asg/LaunchTemplate/Resource", "ImageId", "literal", ""},
		{"cdk/cdk.context.json:2", "MachineImage.lookup name=al2023-ami-ecs-hvm-*-x86_64 (us-east-1)", "ami lookup", "literal", "cached at synth"},
		{"cdk/cdk.context.json:3", "valueFromLookup /aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id (us-east-1)",
			"ssm lookup", "literal", "valueForStringParameter"},
	} {
		t.Run(tc.at, func(t *testing.T) {
			var got *Finding
			for _, f := range find(r, tc.at) {
				if f.Resource == tc.resource {
					got = &f
				}
			}
			require.NotNil(t, got, "no finding of %s at %s: %+v", tc.resource, tc.at, find(r, tc.at))
			require.Equal(t, tc.attribute, got.Attribute)
			require.Equal(t, tc.via, got.Via)
			if tc.note == "" {
				require.Empty(t, got.Note)
			} else {
				require.Contains(t, got.Note, tc.note)
			}
		})
	}
	// Both resources that use the parameter AmiId are named at its default's line.
	var at6 []string
	for _, f := range find(r, "cloudformation/stack.yaml:6") {
		at6 = append(at6, f.Resource)
	}
	require.ElementsMatch(t, []string{"LaunchTemplate", "SubTemplate"}, at6)
}

func TestParameterReferencesAreCurrentPracticeNotFindings(t *testing.T) {
	r := scanFixtures(t, Scanner{})
	got := map[string]string{}
	for _, p := range r.Practices {
		got[fmt.Sprintf("%s:%d %s", p.File, p.Line, p.Resource)] = p.Source
	}
	require.Equal(t, map[string]string{
		"terraform/prod/main.tf:65 aws_launch_template.search":                          "data.aws_ssm_parameter.ecs",
		"terraform/prod/main.tf:78 aws_launch_template.batch":                           "data.aws_ami.al2023",
		"terraform/prod/main.tf:82 aws_launch_template.payments":                        "resolve:ssm",
		"cloudformation/stack.yaml:38 LegacyConfig":                                     "AWS::SSM::Parameter::Value",
		"cloudformation/stack.yaml:44 ResolvedTemplate":                                 "{{resolve:ssm}}",
		"cdk/cdk.out/AppStack.template.json:23 AppStack/Latest/LaunchTemplate/Resource": "AWS::SSM::Parameter::Value",
	}, got)
}

func TestUnparsableFilesAndRemoteSourcesAreWarningsWithTheirLine(t *testing.T) {
	r := scanFixtures(t, Scanner{})
	var got []string
	for _, w := range r.Warnings {
		got = append(got, w.String())
	}
	require.Equal(t, []string{
		"cloudformation/broken.yaml:3: cannot parse: yaml: line 3: did not find expected key",
		"cloudformation/stack.yaml:65: nested stack Remote: TemplateURL is not a local file: not followed",
		"terraform/broken/main.tf:3: cannot parse: Invalid expression: Expected the start of an expression, but found an invalid expression token. (the file is left out)",
		"terraform/prod/main.tf:91: module.eks: source terraform-aws-modules/eks/aws not followed (a remote source)",
		"terraform/prod/main.tf:101: module.vpc: source terraform-aws-modules/vpc/aws not followed (a remote source)",
		"terragrunt/live/prod/remote/terragrunt.hcl:2: source git::https://github.com/acme/infra-modules.git//asg?ref=v1.4.0 not followed (a remote source)",
	}, got)
	require.Equal(t, 17, r.Summary.Files, "the broken files are counted, manifest.json is not")
}

func TestAPathThatDoesNotExistIsAnErrorAndAnUnreadableFileAWarning(t *testing.T) {
	_, err := (&Scanner{}).Scan(context.Background(), []string{filepath.Join(t.TempDir(), "nowhere")})
	require.ErrorContains(t, err, "nowhere: no such file or directory")
	_, err = (&Scanner{}).Scan(context.Background(), nil)
	require.ErrorIs(t, err, ErrNoPaths)

	dir := t.TempDir()
	require.NoError(t, os.Symlink(filepath.Join(dir, "gone.tf"), filepath.Join(dir, "dangling.tf")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ok.tf"), []byte(`resource "aws_instance" "a" { ami = "ami-0123456789abcdef0" }`+"\n"), 0o644))
	r, err := (&Scanner{}).Scan(context.Background(), []string{dir})
	require.NoError(t, err)
	require.Len(t, r.Findings, 1)
	require.Equal(t, filepath.ToSlash(filepath.Join(dir, "ok.tf")), r.Findings[0].File, "the path as given, joined with the file's")
	require.Len(t, r.Warnings, 1)
	require.Contains(t, r.Warnings[0].String(), "dangling.tf: cannot read:")
}

func TestAFileGivenAloneAndAModuleOutsideThePathAreRead(t *testing.T) {
	r, err := (&Scanner{FS: fixtures()}).Scan(context.Background(), []string{"terraform/prod/main.tf"})
	require.NoError(t, err)
	require.NotEmpty(t, find(r, "terraform/prod/main.tf:88"), "the local module ../modules/asg is read though not under the path")
	require.Empty(t, find(r, "terraform/prod/prod.tfvars:1"), "variable files are read only when their directory is walked")
}

// simEC2 returns the demo fleet's account: its AMIs are registered with names, dates and architectures.
func simEC2(t *testing.T) (awsapi.ReadOnlyEC2, func() int, Scanner) {
	a := fleet.New()
	a.ResetCalls()
	calls := func() int { return a.Calls()["ec2:DescribeImages"] }
	return a.ReadOnlyEC2(), calls, Scanner{EC2: a.ReadOnlyEC2(), Region: "us-east-1", Clock: a.Clock()}
}

func TestOnlineFindingsCarryTheAMIFactsAndTheParameterThatKeepsThemCurrent(t *testing.T) {
	_, calls, s := simEC2(t)
	r := scanFixtures(t, s)
	require.False(t, r.Offline)
	require.Equal(t, 1, calls(), "one DescribeImages for %d AMIs", r.Summary.Images)
	byID := map[string]Finding{}
	for _, f := range r.Findings {
		byID[f.ImageID] = f
	}
	ecs := byID["ami-0ec86000000000002"]
	require.NotNil(t, ecs.Image)
	require.Equal(t, "al2023", ecs.Image.OSFamily)
	require.Equal(t, "amazon", ecs.Image.Owner)
	require.Equal(t, "x86_64", ecs.Image.Architecture)
	require.NotNil(t, ecs.Image.AgeDays)
	require.Equal(t, audit.ECSParameterX86_64, ecs.RecommendedParameter)
	require.Equal(t, audit.ECSParameterARM64, byID["ami-0eca6000000000004"].RecommendedParameter)
	require.Equal(t, fleet.EKSarm64.Parameter, byID["ami-0e5a6000000000004"].RecommendedParameter)
	require.Equal(t, fleet.EKSx86.Parameter, byID["ami-0e586000000000003"].RecommendedParameter)
	unknown := byID["ami-0123456789abcdef0"]
	require.Nil(t, unknown.Image)
	require.Contains(t, unknown.Note, "EC2 does not know this AMI in us-east-1")
}

// failingEC2 fails every call, as EC2 does without credentials.
type failingEC2 struct{ awsapi.ReadOnlyEC2 }

func (failingEC2) DescribeImages(context.Context, *ec2.DescribeImagesInput, ...func(*ec2.Options)) (*ec2.DescribeImagesOutput, error) {
	return nil, errors.New("no EC2 IMDS role found")
}

func TestAFailedDescribeImagesMakesTheReportOfflineWithTheSameFindings(t *testing.T) {
	offline := scanFixtures(t, Scanner{OfflineReason: "--offline"})
	failed := scanFixtures(t, Scanner{EC2: failingEC2{}})
	require.True(t, offline.Offline)
	require.Equal(t, "--offline", offline.OfflineReason)
	require.True(t, failed.Offline)
	require.Equal(t, "describing the AMIs (ec2:DescribeImages): no EC2 IMDS role found", failed.OfflineReason)
	require.Equal(t, offline.Findings, failed.Findings)
	for _, f := range failed.Findings {
		require.Nil(t, f.Image)
	}
}

func TestDescribeImagesIsBatchedByHundredIDs(t *testing.T) {
	files := fstest.MapFS{}
	for i := range 250 {
		files[fmt.Sprintf("m%03d/main.tf", i)] = &fstest.MapFile{Data: []byte(fmt.Sprintf(
			"resource \"aws_instance\" \"a\" {\n  ami = \"ami-0%016x\"\n}\n", i))}
	}
	a := fleet.New()
	a.ResetCalls()
	r, err := (&Scanner{FS: files, EC2: a.ReadOnlyEC2(), Clock: a.Clock()}).Scan(context.Background(), []string{"."})
	require.NoError(t, err)
	require.Len(t, r.Findings, 250)
	require.Equal(t, 3, a.Calls()["ec2:DescribeImages"])
}

func TestParameterForAMINames(t *testing.T) {
	for _, tc := range []struct{ name, arch, want string }{
		{"al2023-ami-ecs-hvm-2023.0.20241108-kernel-6.1-arm64", "arm64", audit.ECSParameterARM64},
		{"amzn2-ami-ecs-gpu-hvm-2.0.20241108-x86_64-ebs", "x86_64", "/aws/service/ecs/optimized-ami/amazon-linux-2/gpu/recommended"},
		{"bottlerocket-aws-ecs-2-x86_64-v1.26.1-943d9a41", "x86_64", "/aws/service/bottlerocket/aws-ecs-2/x86_64/latest/image_id"},
		{"amazon-eks-node-al2023-arm64-standard-1.31-v20241109", "arm64", "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/standard/recommended/image_id"},
		{"amazon-eks-node-al2023-x86_64-nvidia-1.30-v20241109", "x86_64", "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/nvidia/recommended/image_id"},
		{"amazon-eks-node-1.29-v20240917", "x86_64", "/aws/service/eks/optimized-ami/1.29/amazon-linux-2/recommended/image_id"},
		{"amazon-eks-arm64-node-1.29-v20240917", "arm64", "/aws/service/eks/optimized-ami/1.29/amazon-linux-2-arm64/recommended/image_id"},
		{"amazon-eks-gpu-node-1.29-v20240917", "x86_64", "/aws/service/eks/optimized-ami/1.29/amazon-linux-2-gpu/recommended/image_id"},
		{"bottlerocket-aws-k8s-1.31-x86_64-v1.26.1-943d9a41", "x86_64", "/aws/service/bottlerocket/aws-k8s-1.31/x86_64/latest/image_id"},
		{"Windows_Server-2022-English-Core-EKS_Optimized-1.31-2024.11.13", "x86_64", "/aws/service/ami-windows-latest/Windows_Server-2022-English-Core-EKS_Optimized-1.31/image_id"},
		{"acme-golden-al2023-2024-11-01", "x86_64", ""},
		{"amzn2-ami-ecs-gpu-hvm-2.0.20241108-x86_64-ebs", "arm64", ""}, // no arm64 GPU parameter
	} {
		require.Equal(t, tc.want, audit.ParameterForAMI(tc.name, tc.arch), tc.name)
	}
}

// TestGoldenOutputs compares the table, JSON and CSV of the fixtures, offline and with the simulated
// account's AMIs, with testdata/*.golden (go test ./internal/audit/iac -update rewrites them).
func TestGoldenOutputs(t *testing.T) {
	_, _, online := simEC2(t)
	for _, mode := range []struct {
		name string
		s    Scanner
	}{{"offline", Scanner{OfflineReason: "--offline", Clock: online.Clock}}, {"online", online}} {
		r := scanFixtures(t, mode.s)
		for _, format := range audit.Formats() {
			t.Run(mode.name+"."+format, func(t *testing.T) {
				var b bytes.Buffer
				require.NoError(t, Write(&b, format, r))
				golden(t, filepath.Join("testdata", "fixtures-"+mode.name+"."+format+".golden"), b.String())
				switch format {
				case audit.FormatJSON:
					var doc map[string]any
					require.NoError(t, json.Unmarshal(b.Bytes(), &doc))
					require.True(t, strings.HasPrefix(b.String(), "{\n  \"schemaVersion\": 1,"), "schemaVersion first")
					var back Report
					require.NoError(t, json.Unmarshal(b.Bytes(), &back))
					require.Len(t, back.Findings, len(r.Findings))
				case audit.FormatCSV:
					rows, err := csv.NewReader(&b).ReadAll()
					require.NoError(t, err)
					require.Equal(t, CSVHeader, rows[0])
					require.Len(t, rows, len(r.Findings)+1)
				}
			})
		}
	}
}

func TestAnUnknownFormatIsTheLiveAuditsError(t *testing.T) {
	require.EqualError(t, Write(&bytes.Buffer{}, "yaml", &Report{}), `--output "yaml": want table, json, csv`)
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "go test ./internal/audit/iac -run Golden -update creates it")
	require.Equal(t, string(want), got)
}

func TestFindingsAreSortedByFileAndLine(t *testing.T) {
	r := scanFixtures(t, Scanner{})
	require.True(t, sort.SliceIsSorted(r.Findings, func(i, j int) bool {
		a, b := r.Findings[i], r.Findings[j]
		return a.File < b.File || a.File == b.File && a.Line < b.Line
	}))
}
