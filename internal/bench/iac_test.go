package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/audit/iac"
)

// iacUnits is how many environments the generated tree holds; each is five Terraform files (iacFilesPerUnit).
const (
	iacUnits        = 1000
	iacFilesPerUnit = 5
	// iacFindingsPerUnit: var.ami_id's default and tfvars value, both map entries of the lookup, the local,
	// the launch configuration's literal, the module input, the remote module's input, the .tf.json default.
	iacFindingsPerUnit = 9
	iacSection         = "\n## audit --iac throughput\n"
)

// writeIaCTree writes iacUnits environments in the shapes of internal/audit/iac's Terraform fixtures under
// dir: envs/eNNNN/{variables.tf, main.tf, terraform.tfvars, extra.tf.json} and modules/mNNNN/main.tf (a local
// module each environment calls).
func writeIaCTree(t *testing.T, dir string) {
	ami := func(i, k int) string { return fmt.Sprintf("ami-0%04x%012x", k, i) }
	for i := range iacUnits {
		env := filepath.Join(dir, "envs", fmt.Sprintf("e%04d", i))
		mod := filepath.Join(dir, "modules", fmt.Sprintf("m%04d", i))
		require.NoError(t, os.MkdirAll(env, 0o755))
		require.NoError(t, os.MkdirAll(mod, 0o755))
		files := map[string]string{
			filepath.Join(env, "variables.tf"): fmt.Sprintf(`variable "region" {
  type    = string
  default = "us-east-1"
}

variable "ami_id" {
  description = "AMI of the orders group"
  type        = string
  default     = %q
}

variable "amis" {
  type = map(string)
  default = {
    us-east-1 = %q
    eu-west-1 = %q
  }
}

variable "unused_ami" {
  default = %q
}
`, ami(i, 1), ami(i, 2), ami(i, 3), ami(i, 4)),
			filepath.Join(env, "main.tf"): fmt.Sprintf(`locals {
  region_ami  = lookup(var.amis, var.region)
  bastion_ami = %q
}

resource "aws_launch_template" "orders" {
  name_prefix   = "orders-"
  image_id      = var.ami_id
  instance_type = "m6i.large"
  tags = {
    previous-ami = %q
  }
}

resource "aws_launch_template" "orders_arm" {
  image_id = local.region_ami
}

resource "aws_instance" "bastion" {
  ami           = local.bastion_ami
  instance_type = "t3.medium"
}

resource "aws_launch_configuration" "legacy" {
  image_id      = %q
  instance_type = "t3.large"
}

data "aws_ssm_parameter" "ecs" {
  name = "/aws/service/ecs/optimized-ami/amazon-linux-2023/recommended/image_id"
}

resource "aws_launch_template" "search" {
  image_id = data.aws_ssm_parameter.ecs.value
}

module "workers" {
  source = "../../modules/m%04d"
  name   = "workers"
  ami_id = %q
}

module "eks" {
  source  = "terraform-aws-modules/eks/aws"
  version = "~> 20.0"
  eks_managed_node_groups = {
    default = {
      ami_id = %q
    }
  }
}
`, ami(i, 5), ami(i, 6), ami(i, 7), i, ami(i, 8), ami(i, 9)),
			filepath.Join(env, "terraform.tfvars"): fmt.Sprintf("ami_id      = %q\nretired_ami = %q\n", ami(i, 10), ami(i, 11)),
			filepath.Join(env, "extra.tf.json"): fmt.Sprintf(`{
  "variable": { "node_ami": { "type": "string", "default": %q } },
  "resource": { "aws_launch_template": { "nodes": { "name_prefix": "nodes-", "image_id": "${var.node_ami}" } } }
}
`, ami(i, 12)),
			filepath.Join(mod, "main.tf"): fmt.Sprintf(`variable "name" {
  type = string
}

variable "ami_id" {
  type    = string
  default = %q
}

resource "aws_launch_template" "this" {
  name_prefix = "${var.name}-"
  image_id    = var.ami_id
}

resource "aws_autoscaling_group" "this" {
  name     = var.name
  min_size = 1
  max_size = 4
  launch_template {
    id      = aws_launch_template.this.id
    version = aws_launch_template.this.latest_version
  }
}

output "ami" {
  value = var.ami_id
}
`, ami(i, 13)),
		}
		for p, body := range files {
			require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		}
	}
}

// iacThroughput scans a generated tree of 5,000 Terraform files offline three times and returns the median
// run's files and lines per second, with the run's figures.
func iacThroughput(t *testing.T) (filesPerS, linesPerS float64, r *iac.Report, took time.Duration) {
	dir := t.TempDir()
	writeIaCTree(t, dir)
	var runs []time.Duration
	for range 3 {
		runtime.GC()
		start := time.Now()
		var err error
		r, err = (&iac.Scanner{OfflineReason: "bench"}).Scan(context.Background(), []string{dir})
		runs = append(runs, time.Since(start))
		require.NoError(t, err)
	}
	require.Equal(t, iacUnits*iacFilesPerUnit, r.Summary.Files)
	require.Equal(t, iacUnits*iacFindingsPerUnit, r.Summary.Findings, "every generated AMI that reaches a resource is found")
	require.Len(t, r.Warnings, iacUnits, "one per remote module: not followed")
	sort.Slice(runs, func(i, j int) bool { return runs[i] < runs[j] })
	took = runs[1]
	return float64(r.Summary.Files) / took.Seconds(), float64(r.Summary.Lines) / took.Seconds(), r, took
}

// TestIaCThroughput measures `audit --iac` over a generated tree of 5,000 Terraform files in the shapes of the
// fixtures (offline: parsing and following references, no AWS call) and rewrites the "audit --iac throughput"
// section of docs/performance.md (make bench runs it after TestBenchmarks, which keeps the section).
func TestIaCThroughput(t *testing.T) {
	if os.Getenv("PATCH_AGENT_BENCH") == "" {
		t.Skip("measurements run with `make bench` (PATCH_AGENT_BENCH=1)")
	}
	files, lines, r, took := iacThroughput(t)
	host, _ := os.Hostname()
	var b strings.Builder
	b.WriteString(iacSection[1:])
	fmt.Fprintf(&b, "\nWritten by `PATCH_AGENT_BENCH=1 go test -count=1 ./internal/bench -run TestIaCThroughput -v` (also run by `make bench`):\n")
	fmt.Fprintf(&b, "`patch-agent audit --iac` offline over a generated tree of %d Terraform files (%d environments, each variables.tf, main.tf,\n", r.Summary.Files, iacUnits)
	b.WriteString("terraform.tfvars, extra.tf.json and the local module it calls, in the shapes of internal/audit/iac's fixtures: variable\n")
	b.WriteString("defaults, a map lookup, locals, tfvars, a local and a remote module, a data source, .tf.json), the median of three runs.\n")
	fmt.Fprintf(&b, "Machine: %s, %d cores, %s, %s; shared with other work.\n\n", host, runtime.NumCPU(), runtime.Version(), time.Now().UTC().Format(time.RFC3339))
	b.WriteString("| figure | measured |\n| --- | --- |\n")
	fmt.Fprintf(&b, "| files per second | %.0f |\n", files)
	fmt.Fprintf(&b, "| lines per second | %.0f |\n", lines)
	fmt.Fprintf(&b, "| one scan: files, lines, findings, practices | %.2f s: %d files, %d lines, %d findings of %d AMIs, %d practices |\n",
		took.Seconds(), r.Summary.Files, r.Summary.Lines, r.Summary.Findings, r.Summary.Images, r.Summary.Practices)
	t.Log("\n" + b.String())
	doc := filepath.Join("..", "..", "docs", "performance.md")
	old, err := os.ReadFile(doc)
	require.NoError(t, err)
	text := string(old)
	if i := strings.Index(text, iacSection); i >= 0 {
		rest := text[i+len(iacSection):]
		end := len(text)
		if j := strings.Index(rest, "\n## "); j >= 0 {
			end = i + len(iacSection) + j + 1
		}
		text = text[:i] + text[end:]
	}
	text = strings.TrimRight(text, "\n") + "\n\n" + b.String()
	require.NoError(t, os.WriteFile(doc, []byte(text), 0o644))
}
