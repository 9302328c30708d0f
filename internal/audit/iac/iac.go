// Package iac finds the AMI ids written into the code that builds a fleet: Terraform (HCL, .tf.json,
// .tfvars, terragrunt.hcl inputs), CloudFormation templates (YAML with intrinsic-function tags, and JSON, with
// nested stacks whose TemplateURL is a local file) and CDK output (cdk.out/*.template.json, and cdk.context.json,
// where MachineImage lookups cache AMI ids). It reports every literal AMI id that reaches a launch template,
// launch configuration, instance, Auto Scaling group or EKS node group — directly, or through a variable
// default, tfvars value, local, map lookup, module input, CloudFormation mapping or parameter default — at the
// file and line where it is written. Data sources, "resolve:ssm:" and AWS::SSM::Parameter::Value<...>
// parameters are reported as current practice: the code follows a parameter. It is `patch-agent audit --iac`
// (docs/audit.md).
package iac

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// AMIPattern matches an AMI id: "ami-" and 8 or 17 hexadecimal digits (older ids have 8, newer 17; the range
// in between is accepted so that a mistyped id is still found).
var AMIPattern = regexp.MustCompile(`ami-[0-9a-f]{8,17}`)

// amiExact matches a value that is an AMI id and nothing else.
var amiExact = regexp.MustCompile(`^ami-[0-9a-f]{8,17}$`)

// Kinds of code (Finding.Kind, Practice.Kind).
const (
	KindTerraform      = "terraform"
	KindTerragrunt     = "terragrunt"
	KindCloudFormation = "cloudformation"
	KindCDKContext     = "cdk-context"
)

// Finding is one literal AMI id that reaches a resource that launches instances.
type Finding struct {
	// File and Line are where the AMI id is written (the path as given on the command line, joined with the
	// file's path below it).
	File string `json:"file"`
	Line int    `json:"line"`
	// Resource is the address of the resource the AMI reaches: "aws_launch_template.web",
	// "module.workers.aws_launch_template.this", a CloudFormation logical id (or the CDK construct path of
	// aws:cdk:path) prefixed by the nested stacks it is in, or the cdk.context.json lookup.
	Resource string `json:"resource"`
	// ResourceType is the Terraform or CloudFormation type ("aws_launch_template", "AWS::EC2::LaunchTemplate"),
	// "module" for a module input not followed, or "cdk.context.json".
	ResourceType string `json:"resourceType"`
	// ResourceFile and ResourceLine are where the resource's attribute (image_id, ImageId ...) is written.
	ResourceFile string `json:"resourceFile"`
	ResourceLine int    `json:"resourceLine"`
	// Attribute is the attribute the AMI reaches (image_id, ami, ImageId, a module input).
	Attribute string `json:"attribute"`
	ImageID   string `json:"imageId"`
	// Via is how the AMI reaches the attribute, from the attribute to the literal: "literal", or references
	// such as "local.ami > var.amis default" or "!FindInMap AMIs".
	Via string `json:"via"`
	// Kind is the kind of code: terraform, terragrunt, cloudformation or cdk-context.
	Kind string `json:"kind"`
	// Note says what else to know: a remote module not followed, a value CDK cached at synth.
	Note string `json:"note"`
	// Image holds what DescribeImages tells of the AMI; nil offline or when EC2 does not know it.
	Image *Image `json:"image"`
	// RecommendedParameter is the public SSM parameter that keeps an AMI of this OS family and architecture
	// current ("" when the AMI is not known, or no public parameter fits it).
	RecommendedParameter string `json:"recommendedParameter"`
}

// Image is what DescribeImages tells of an AMI.
type Image struct {
	Name         string     `json:"name"`
	Owner        string     `json:"owner"` // the owner alias (amazon, aws-marketplace) or the account id
	Created      *time.Time `json:"created"`
	AgeDays      *int       `json:"ageDays"`
	Architecture string     `json:"architecture"`
	OSFamily     string     `json:"osFamily"`
	Deprecated   bool       `json:"deprecated"`
}

// Practice is an attribute of a resource that launches instances whose AMI follows a parameter: current
// practice, not a finding.
type Practice struct {
	File         string `json:"file"`
	Line         int    `json:"line"`
	Resource     string `json:"resource"`
	ResourceType string `json:"resourceType"`
	Attribute    string `json:"attribute"`
	// Source is how the AMI is chosen: "data.aws_ssm_parameter.ecs", "data.aws_ami.al2023", "resolve:ssm",
	// "{{resolve:ssm}}" or "AWS::SSM::Parameter::Value".
	Source string `json:"source"`
	// Detail is the reference or parameter name.
	Detail string `json:"detail"`
	Kind   string `json:"kind"`
}

// Warning is a file that could not be read or parsed, or a module or stack that was not followed; the run
// goes on without it.
type Warning struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Message string `json:"message"`
}

func (w Warning) String() string {
	if w.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", w.File, w.Line, w.Message)
	}
	return w.File + ": " + w.Message
}

// Summary counts the report's rows.
type Summary struct {
	Files     int `json:"files"`
	Lines     int `json:"lines"`
	Findings  int `json:"findings"`
	Images    int `json:"images"` // distinct AMI ids found
	Practices int `json:"practices"`
	Warnings  int `json:"warnings"`
}

// Report is the result of a scan.
type Report struct {
	Paths       []string  `json:"paths"`
	Region      string    `json:"region"`
	GeneratedAt time.Time `json:"generatedAt"`
	// Offline is true when no AMI facts were read (--offline, no credentials, or DescribeImages failed:
	// OfflineReason says which).
	Offline       bool       `json:"offline"`
	OfflineReason string     `json:"offlineReason"`
	Summary       Summary    `json:"summary"`
	Findings      []Finding  `json:"findings"`
	Practices     []Practice `json:"practices"`
	Warnings      []Warning  `json:"warnings"`
}

// Scanner reads the code under some paths and reports the AMI ids it hard-codes.
type Scanner struct {
	// FS holds the files. nil: the operating system's, with the paths as given (relative to the working
	// directory, or absolute). Paths are slash-separated.
	FS fs.FS
	// EC2 reads the AMIs' facts (DescribeImages); nil: offline.
	EC2 awsapi.ReadOnlyEC2
	// Region is written in the report.
	Region string
	// OfflineReason is written in the report when EC2 is nil ("--offline", "no credentials: ...").
	OfflineReason string
	// Clock dates the report and the AMIs' ages. Default: the real clock.
	Clock clock.PassiveClock
}

// ErrNoPaths is returned by Scan without a path.
var ErrNoPaths = errors.New("no path to read: give the directories or files of the Terraform, CloudFormation or CDK code")

// Scan reads every Terraform, terragrunt, CloudFormation and CDK file under paths (directories are walked;
// .terraform, .terragrunt-cache, node_modules and .git are skipped) and returns the report. Errors: no path,
// or a path that does not exist or cannot be read. A file that cannot be read or parsed, and a module or
// nested stack that cannot be followed, is a warning in the report, never the end of the scan. A failed
// DescribeImages makes the report offline (OfflineReason says why).
func (s *Scanner) Scan(ctx context.Context, paths []string) (*Report, error) {
	if len(paths) == 0 {
		return nil, ErrNoPaths
	}
	clk := s.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	fsys := s.FS
	if fsys == nil {
		fsys = osFS{}
	}
	sc := newScan(fsys)
	for _, p := range paths {
		p = cleanPath(p)
		if err := sc.walk(p); err != nil {
			return nil, err
		}
	}
	sc.analyse()
	r := &Report{Paths: paths, Region: s.Region, GeneratedAt: clk.Now().UTC(), Findings: sc.findings, Practices: sc.practices,
		Warnings: sc.warnings}
	sortReport(r)
	if s.EC2 == nil {
		r.Offline, r.OfflineReason = true, s.OfflineReason
		if r.OfflineReason == "" {
			r.OfflineReason = "offline"
		}
	} else if len(r.Findings) > 0 {
		if err := describe(ctx, s.EC2, r, clk.Now()); err != nil {
			r.Offline, r.OfflineReason = true, err.Error()
		}
	}
	images := map[string]bool{}
	for _, f := range r.Findings {
		images[f.ImageID] = true
	}
	r.Summary = Summary{Files: sc.files, Lines: sc.lines, Findings: len(r.Findings), Images: len(images),
		Practices: len(r.Practices), Warnings: len(r.Warnings)}
	return r, nil
}

// Hardcoded reports whether the report has a finding (--fail-if-hardcoded).
func (r *Report) Hardcoded() bool { return len(r.Findings) > 0 }

func cleanPath(p string) string {
	p = strings.ReplaceAll(p, "\\", "/")
	if p == "" {
		return "."
	}
	return path.Clean(p)
}

func sortReport(r *Report) {
	sort.SliceStable(r.Findings, func(i, j int) bool {
		a, b := r.Findings[i], r.Findings[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Resource < b.Resource
	})
	sort.SliceStable(r.Practices, func(i, j int) bool {
		a, b := r.Practices[i], r.Practices[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Resource < b.Resource
	})
	sort.SliceStable(r.Warnings, func(i, j int) bool {
		a, b := r.Warnings[i], r.Warnings[j]
		if a.File != b.File {
			return a.File < b.File
		}
		return a.Line < b.Line
	})
}

// osFS is the operating system's files under the names given: relative to the working directory, absolute,
// or with "..", which os.DirFS would refuse. Names are slash-separated.
type osFS struct{}

func (osFS) Open(name string) (fs.File, error)          { return os.Open(name) }
func (osFS) ReadFile(name string) ([]byte, error)       { return os.ReadFile(name) }
func (osFS) ReadDir(name string) ([]fs.DirEntry, error) { return os.ReadDir(name) }
func (osFS) Stat(name string) (fs.FileInfo, error)      { return os.Stat(name) }
