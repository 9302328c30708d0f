package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

func TestKubeAssetsComeFromKUBEBUILDER_ASSETSOrTheCache(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("KUBEBUILDER_ASSETS", dir)
	got, missing := KubeAssets()
	if got != dir || missing == "" {
		t.Fatalf("empty assets dir: got %q, missing %q", got, missing)
	}
	for _, bin := range []string{"etcd", "kube-apiserver"} {
		if err := os.WriteFile(filepath.Join(dir, bin), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if got, missing = KubeAssets(); got != dir || missing != "" {
		t.Fatalf("both binaries present: got %q, missing %q", got, missing)
	}

	cache := t.TempDir()
	t.Setenv("KUBEBUILDER_ASSETS", "")
	t.Setenv("XDG_CACHE_HOME", cache)
	got, missing = KubeAssets()
	want := filepath.Join(cache, "patch-agent", "testbin", "kube-"+KubeVersion+"-etcd-"+EtcdVersion)
	if got != want || missing == "" {
		t.Fatalf("cache default: got %q (want %q), missing %q", got, want, missing)
	}
}
