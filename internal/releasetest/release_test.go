package releasetest

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// tag is the release the test cuts: a semantic version with a pre-release part, never one of the project's.
const tag = "v0.0.0-releasetest.1"

// root is the repository root, relative to this package.
const root = "../.."

// git runs git in dir with a fixed identity and returns its trimmed output.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=releasetest", "-c", "user.email=releasetest@example.com",
		"-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %s: %s", strings.Join(args, " "), out)
	return strings.TrimSpace(string(out))
}

// cloneWorkingTree clones the repository into a temporary directory and commits the working tree's changes
// (modified, new and deleted files that git does not ignore) on top, so the release is built from exactly
// the code under test.
func cloneWorkingTree(t *testing.T) string {
	t.Helper()
	src, err := filepath.Abs(root)
	require.NoError(t, err)
	clone := filepath.Join(t.TempDir(), "patch-agent")
	git(t, src, "clone", "--quiet", "--shared", src, clone)
	for _, f := range lines(git(t, src, "ls-files", "--modified", "--others", "--exclude-standard")) {
		data, err := os.ReadFile(filepath.Join(src, f))
		if os.IsNotExist(err) {
			continue // deleted: handled below
		}
		require.NoError(t, err)
		info, err := os.Stat(filepath.Join(src, f))
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(clone, f)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(clone, f), data, info.Mode().Perm()))
	}
	for _, f := range lines(git(t, src, "ls-files", "--deleted")) {
		require.NoError(t, os.RemoveAll(filepath.Join(clone, f)))
	}
	if git(t, clone, "status", "--porcelain") != "" {
		git(t, clone, "add", "-A")
		git(t, clone, "commit", "--quiet", "-m", "the working tree under test")
	}
	return clone
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// release runs `make release` in dir with the test's platforms; extra environment wins.
func release(dir string, extra ...string) (string, error) {
	cmd := exec.Command("make", "--no-print-directory", "release")
	cmd.Dir = dir
	var env []string
	for _, e := range os.Environ() {
		name, _, _ := strings.Cut(e, "=")
		switch name {
		case "RELEASE_ALLOW_UNTAGGED", "RELEASE_IMAGE", "VERSION", "COMMIT", "DATE", "SOURCE_DATE_EPOCH", "MAKEFLAGS", "MFLAGS":
			continue
		}
		env = append(env, e)
	}
	cmd.Env = append(append(env, "RELEASE_PLATFORMS=linux/amd64", "RELEASE_IMAGE_PLATFORMS=linux/amd64"), extra...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// imageToolsBuilt says whether the image tools are there, asking scripts/ensure-ociimage.sh with GOPROXY=off:
// it succeeds when they are built (or can be built from the module cache alone) and never downloads.
func imageToolsBuilt(dir string) bool {
	cmd := exec.Command("scripts/ensure-ociimage.sh")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOPROXY=off")
	return cmd.Run() == nil
}

func TestMakeReleaseBuildsTheTaggedVersionAndRefusesAnythingElse(t *testing.T) {
	for _, tool := range []string{"git", "make", "sha256sum", "tar", "gzip"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is not on PATH: make release needs it", tool)
			}
			t.Skipf("%s is not on PATH: make release needs it", tool)
		}
	}
	clone := cloneWorkingTree(t)
	commit := git(t, clone, "rev-parse", "HEAD")

	out, err := release(clone)
	require.Error(t, err, "an untagged HEAD is refused: %s", out)
	require.Contains(t, out, "is not at a v* tag")

	git(t, clone, "tag", "-a", "v1.2", "-m", "not a semantic version")
	out, err = release(clone)
	require.Error(t, err, "a tag that is no semantic version is refused: %s", out)
	require.Contains(t, out, "tag v1.2 at HEAD is not a semantic version")
	git(t, clone, "tag", "-d", "v1.2")

	git(t, clone, "tag", "-a", tag, "-m", "patch-agent "+tag)
	stray := filepath.Join(clone, "stray.txt")
	require.NoError(t, os.WriteFile(stray, []byte("uncommitted"), 0o644))
	out, err = release(clone)
	require.Error(t, err, "a dirty tree is refused: %s", out)
	require.Contains(t, out, "uncommitted changes")
	require.NoError(t, os.Remove(stray))

	withImage := imageToolsBuilt(clone)
	if !withImage && os.Getenv("CI") != "" {
		t.Fatal("the image tools are not built (make testbin builds them); CI never leaves the image out")
	}
	imageEnv := "RELEASE_IMAGE=1"
	if !withImage {
		imageEnv = "RELEASE_IMAGE=0"
		t.Log("image tools not built (make testbin): the release is checked without its image")
	}
	out, err = release(clone, imageEnv)
	require.NoError(t, err, out)

	dir := filepath.Join(clone, "bin", "release", tag)
	name := "patch-agent_" + tag + "_linux_amd64"
	sbomFile := "patch-agent_" + tag + ".spdx.json"

	t.Run("SHA256SUMS verifies the archive and the SBOM", func(t *testing.T) {
		cmd := exec.Command("sha256sum", "-c", "SHA256SUMS")
		cmd.Dir = dir
		sumOut, err := cmd.CombinedOutput()
		require.NoError(t, err, string(sumOut))
		want := []string{name + ".tar.gz: OK", sbomFile + ": OK"}
		if withImage {
			want = append(want, "patch-agent_"+tag+"_image.txt: OK")
		}
		require.ElementsMatch(t, want, lines(string(sumOut)))
	})

	t.Run("the archive holds the binary, LICENSE, NOTICE and README.md, and the binary prints the tag", func(t *testing.T) {
		files := untar(t, filepath.Join(dir, name+".tar.gz"))
		require.ElementsMatch(t, []string{"patch-agent", "LICENSE", "NOTICE", "README.md"}, slices.Sorted(maps.Keys(files)))
		license, err := os.ReadFile(filepath.Join(root, "LICENSE"))
		require.NoError(t, err)
		require.Equal(t, string(license), string(files["LICENSE"]))
		if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
			t.Skip("the release binary is linux/amd64")
		}
		bin := filepath.Join(t.TempDir(), "patch-agent")
		require.NoError(t, os.WriteFile(bin, files["patch-agent"], 0o755))
		versionOut, err := exec.Command(bin, "version").CombinedOutput()
		require.NoError(t, err, string(versionOut))
		require.Regexp(t, `^patch-agent `+regexp.QuoteMeta(tag)+` \(commit `+commit+`, built \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ, go[0-9.]+, linux/amd64\)$`,
			strings.TrimSpace(string(versionOut)))
	})

	t.Run("the SBOM is SPDX 2.3 and names the module, its version and its dependencies", func(t *testing.T) {
		raw, err := os.ReadFile(filepath.Join(dir, sbomFile))
		require.NoError(t, err)
		var doc struct {
			SPDXVersion       string   `json:"spdxVersion"`
			DataLicense       string   `json:"dataLicense"`
			SPDXID            string   `json:"SPDXID"`
			DocumentDescribes []string `json:"documentDescribes"`
			Packages          []struct {
				Name             string `json:"name"`
				SPDXID           string `json:"SPDXID"`
				VersionInfo      string `json:"versionInfo"`
				LicenseConcluded string `json:"licenseConcluded"`
				ExternalRefs     []struct {
					ReferenceType    string `json:"referenceType"`
					ReferenceLocator string `json:"referenceLocator"`
				} `json:"externalRefs"`
			} `json:"packages"`
			Relationships []struct {
				From string `json:"spdxElementId"`
				Type string `json:"relationshipType"`
				To   string `json:"relatedSpdxElement"`
			} `json:"relationships"`
		}
		require.NoError(t, json.Unmarshal(raw, &doc))
		require.Equal(t, "SPDX-2.3", doc.SPDXVersion)
		require.Equal(t, "CC0-1.0", doc.DataLicense)
		require.Equal(t, "SPDXRef-DOCUMENT", doc.SPDXID)
		require.Len(t, doc.DocumentDescribes, 1)
		byName := map[string]int{}
		ids := map[string]bool{}
		for i, p := range doc.Packages {
			byName[p.Name] = i
			require.False(t, ids[p.SPDXID], "SPDXID %s is unique", p.SPDXID)
			require.Regexp(t, `^SPDXRef-[A-Za-z0-9.-]+$`, p.SPDXID)
			ids[p.SPDXID] = true
			require.NotEqualf(t, "NOASSERTION", p.LicenseConcluded, "%s has a licence", p.Name)
		}
		main := doc.Packages[byName["github.com/patch-agent/patch-agent"]]
		require.Equal(t, "github.com/patch-agent/patch-agent", main.Name)
		require.Equal(t, doc.DocumentDescribes[0], main.SPDXID)
		require.Equal(t, tag, main.VersionInfo)
		require.Equal(t, "Apache-2.0", main.LicenseConcluded)
		require.Contains(t, byName, "github.com/aws/aws-sdk-go-v2", "the SDK the binary links")
		sdk := doc.Packages[byName["github.com/aws/aws-sdk-go-v2"]]
		require.Equal(t, "Apache-2.0 AND BSD-3-Clause", sdk.LicenseConcluded)
		require.Equal(t, "purl", sdk.ExternalRefs[0].ReferenceType)
		require.Equal(t, "pkg:golang/github.com/aws/aws-sdk-go-v2@"+sdk.VersionInfo, sdk.ExternalRefs[0].ReferenceLocator)
		dependsOn := 0
		for _, r := range doc.Relationships {
			if r.From == main.SPDXID && r.Type == "DEPENDS_ON" {
				require.True(t, ids[r.To], "relationship to a package of the document: %s", r.To)
				dependsOn++
			}
		}
		require.Equal(t, len(doc.Packages)-1, dependsOn, "every other package is a dependency of patch-agent")
	})

	t.Run("the image has the same version and the digest the release records", func(t *testing.T) {
		if !withImage {
			t.Skip("image tools not built: run make testbin")
		}
		index, err := os.ReadFile(filepath.Join(dir, "oci", "index.json"))
		require.NoError(t, err)
		var idx struct {
			Annotations map[string]string `json:"annotations"`
		}
		require.NoError(t, json.Unmarshal(index, &idx))
		require.Equal(t, tag, idx.Annotations["org.opencontainers.image.version"])
		require.Equal(t, commit, idx.Annotations["org.opencontainers.image.revision"])
		recorded, err := os.ReadFile(filepath.Join(dir, "patch-agent_"+tag+"_image.txt"))
		require.NoError(t, err)
		sum := sha256.Sum256(index)
		require.Equal(t, "sha256:"+hex.EncodeToString(sum[:]), strings.TrimSpace(string(recorded)),
			"the recorded digest is the image index's (what crane push --index pushes)")
	})
}

// untar reads a gzip'd tar archive: name -> contents.
func untar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	out := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		require.Zero(t, h.Uid, "%s: owner 0", h.Name)
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		out[h.Name] = b
	}
}
