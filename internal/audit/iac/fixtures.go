package iac

import (
	"embed"
	"io/fs"
)

// embedded is the fixture tree of the tests, embedded for `patch-agent demo --scenario audit`. Only the demo
// refers to it, so the production build (-tags nodemo, no demo) links none of it.
//
//go:embed testdata/fixtures
var embedded embed.FS

// Fixtures returns the fixture tree under the name "fixtures": Terraform, terragrunt, CloudFormation and CDK
// code in every shape the scanner follows, some of it deliberately broken.
func Fixtures() fs.FS {
	sub, err := fs.Sub(embedded, "testdata")
	if err != nil {
		panic(err) // the embedded directory is always there
	}
	return sub
}
