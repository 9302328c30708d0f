package modlicense

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// root is the repository root, relative to this package.
const root = "../.."

func TestRecognizeNamesEachLicenceByTheWordingItRequires(t *testing.T) {
	const bsd = `Redistribution and use in source and binary forms, with or without
modification, are permitted provided that the following conditions are met:
1. Redistributions of source code must retain the above copyright notice.
2. Redistributions in binary form must reproduce the above copyright notice.
`
	cases := []struct {
		name string
		text string
		want []string
	}{
		{"MIT", "Permission is hereby granted, free of charge, to any person obtaining a copy\nof this software", []string{"MIT"}},
		{"ISC with and/or", "Permission to use, copy, modify, and/or distribute this software for any\npurpose with or without fee is hereby granted", []string{"ISC"}},
		{"ISC with and", "Permission to use, copy, modify, and distribute this software for any purpose with or without fee is hereby granted", []string{"ISC"}},
		{"BSD-2-Clause", bsd, []string{"BSD-2-Clause"}},
		{"BSD-2-Clause quoted as Markdown", "> Redistribution and use in source and binary forms, with or without\n> modification, are permitted provided that", []string{"BSD-2-Clause"}},
		{"BSD-3-Clause", bsd + "3. Neither the name of Google LLC nor the names of its\ncontributors may be used to endorse or promote products derived from this software", []string{"BSD-3-Clause"}},
		{"BSD-4-Clause is not BSD-3", bsd + "3. All advertising materials mentioning features or use of this software must display", []string{"BSD-4-Clause"}},
		{"Apache-2.0 full text", "Apache License\n Version 2.0, January 2004\n http://www.apache.org/licenses/", []string{"Apache-2.0"}},
		{"Apache-2.0 notice in comments", "// Licensed under the Apache License, Version 2.0 (the \"License\");", []string{"Apache-2.0"}},
		{"MIT and Apache-2.0 in one file", "Permission is hereby granted, free of charge, to any person obtaining a copy\n\nLicensed under the Apache License, Version 2.0", []string{"Apache-2.0", "MIT"}},
		{"MPL-2.0 naming the GNU licences as secondary", "Mozilla Public License Version 2.0\n\"Secondary License\" means either the GNU General Public License, Version 2.0", []string{"MPL-2.0"}},
		{"GPL", "GNU GENERAL PUBLIC LICENSE\n Version 3, 29 June 2007", []string{"GPL"}},
		{"LGPL", "GNU LESSER GENERAL PUBLIC LICENSE", []string{"LGPL"}},
		{"AGPL", "GNU AFFERO GENERAL PUBLIC LICENSE", []string{"AGPL"}},
		{"nothing known", "All rights reserved. Do not copy.", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Recognize(c.text)
			if len(c.want) == 0 {
				require.Empty(t, got)
				return
			}
			require.Equal(t, c.want, got)
		})
	}
}

func TestCheckRefusesEveryLicenceOutsideTheAllowList(t *testing.T) {
	mods := []Module{
		{Path: "example.com/ok", Version: "v1.0.0", Licenses: []string{"Apache-2.0", "MIT"}, Files: []string{"LICENSE"}},
		{Path: "example.com/copyleft", Version: "v0.2.0", Licenses: []string{"GPL", "MIT"}, Files: []string{"COPYING"}},
		{Path: "example.com/advertising", Version: "v3.0.0", Licenses: []string{"BSD-4-Clause"}, Files: []string{"LICENSE"}},
	}
	err := Check(mods)
	require.Error(t, err)
	require.Contains(t, err.Error(), "example.com/copyleft@v0.2.0 is under GPL (COPYING)")
	require.Contains(t, err.Error(), "example.com/advertising@v3.0.0 is under BSD-4-Clause")
	require.NotContains(t, err.Error(), "example.com/ok")
	require.NoError(t, Check(mods[:1]))
}

func TestIdentifyReadsTheLicencesBesideALinkedPackageAndFailsWithoutOne(t *testing.T) {
	dir := t.TempDir()
	pkg := filepath.Join(dir, "third_party", "forked")
	require.NoError(t, os.MkdirAll(pkg, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "LICENSE"), []byte("Apache License\nVersion 2.0, January 2004"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "NOTICE"), []byte("Example\nCopyright Example"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(pkg, "LICENSE"), []byte("Permission is hereby granted, free of charge, to any person obtaining a copy"), 0o644))

	m, err := Identify("example.com/m", "v1.2.3", dir, []string{pkg})
	require.NoError(t, err)
	require.Equal(t, []string{"Apache-2.0", "MIT"}, m.Licenses)
	require.Equal(t, []string{"LICENSE", "third_party/forked/LICENSE"}, m.Files)
	require.Equal(t, []string{"NOTICE"}, m.Notices)
	require.Equal(t, "Apache-2.0 AND MIT", m.Expression())

	m, err = Identify("example.com/m", "v1.2.3", dir, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"Apache-2.0"}, m.Licenses, "a subdirectory no linked package is in does not count")

	_, err = Identify("example.com/none", "v0.1.0", t.TempDir(), nil)
	require.ErrorContains(t, err, "example.com/none@v0.1.0 has no licence file")

	unknown := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(unknown, "LICENSE"), []byte("All rights reserved."), 0o644))
	_, err = Identify("example.com/unknown", "v0.1.0", unknown, nil)
	require.ErrorContains(t, err, "LICENSE holds no licence this check recognises")
}

// TestTheProductionBinaryLinksOnlyAllowedLicencesAndTheFilesSayWhich reads the module cache only: it lists
// what ./cmd/patch-agent links with -tags nodemo for linux and darwin, and requires every licence to be
// allowed and docs/licenses.md and NOTICE to match (scripts/licenses.sh rewrites them).
func TestTheProductionBinaryLinksOnlyAllowedLicencesAndTheFilesSayWhich(t *testing.T) {
	mods, err := Linked(Production(root))
	require.NoError(t, err)
	require.NotEmpty(t, mods)
	paths := map[string]bool{}
	for _, m := range mods {
		paths[m.Path] = true
		require.NotEmptyf(t, m.Licenses, "%s", m.Path)
	}
	require.True(t, paths["github.com/aws/aws-sdk-go-v2"], "the AWS SDK is linked")
	require.False(t, paths["github.com/patch-agent/patch-agent"], "the main module is not listed")
	require.NoError(t, Check(mods))

	doc, err := os.ReadFile(filepath.Join(root, "docs", "licenses.md"))
	require.NoError(t, err)
	require.Equal(t, Markdown(mods), string(doc), "docs/licenses.md is out of date: run scripts/licenses.sh")
	notice, err := os.ReadFile(filepath.Join(root, "NOTICE"))
	require.NoError(t, err)
	want, err := Notice(mods)
	require.NoError(t, err)
	require.Equal(t, want, string(notice), "NOTICE is out of date: run scripts/licenses.sh")
}
