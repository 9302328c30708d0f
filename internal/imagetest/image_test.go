package imagetest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Media types of the OCI Image specification (image-spec v1.1 media-types.md).
const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
	Platform    *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform"`
}

type index struct {
	MediaType   string            `json:"mediaType"`
	Manifests   []descriptor      `json:"manifests"`
	Annotations map[string]string `json:"annotations"`
}

type manifest struct {
	MediaType string       `json:"mediaType"`
	Config    descriptor   `json:"config"`
	Layers    []descriptor `json:"layers"`
}

type config struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Config       struct {
		Entrypoint []string          `json:"Entrypoint"`
		Cmd        []string          `json:"Cmd"`
		User       string            `json:"User"`
		Labels     map[string]string `json:"Labels"`
	} `json:"config"`
}

// layoutDir returns the image layout under test.
func layoutDir(t *testing.T) string {
	dir := os.Getenv("PATCH_AGENT_IMAGE")
	if dir == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("PATCH_AGENT_IMAGE is not set: make test builds the image (make image) and names its layout; CI never skips this test")
		}
		t.Skip("PATCH_AGENT_IMAGE is not set: run make test, or make image and PATCH_AGENT_IMAGE=bin/image/oci go test ./internal/imagetest")
	}
	dir, _, _ = strings.Cut(dir, "@") // scripts/image.sh prints DIR@sha256:...
	return dir
}

func blob(t *testing.T, dir, digest string) []byte {
	t.Helper()
	alg, hex, ok := strings.Cut(digest, ":")
	require.True(t, ok, "digest %q", digest)
	b, err := os.ReadFile(filepath.Join(dir, "blobs", alg, hex))
	require.NoError(t, err)
	return b
}

func decode(t *testing.T, b []byte, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(b, v))
}

// files reads a gzip'd tar layer: name -> header and contents.
func files(t *testing.T, layer []byte) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(layer))
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	hdrs, data := map[string]*tar.Header{}, map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		name := strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
		hdrs[name] = h
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		data[name] = b
	}
	return hdrs, data
}

// elfMachine is the ELF machine of each image architecture.
var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// TestImageRunsTheLeanStampedAgentAsNonRootOnEveryPlatform inspects the image make image built: an index over
// linux/amd64 and linux/arm64; per platform the entrypoint, user 65532, the OCI labels, the files (a static
// binary, CA certificates, /etc/passwd); the binary of this machine's architecture is run (`version`), the
// other one is checked by its ELF header.
func TestImageRunsTheLeanStampedAgentAsNonRootOnEveryPlatform(t *testing.T) {
	dir := layoutDir(t)
	layoutFile, err := os.ReadFile(filepath.Join(dir, "oci-layout"))
	require.NoError(t, err, "an OCI image layout has an oci-layout file")
	require.JSONEq(t, `{"imageLayoutVersion": "1.0.0"}`, string(layoutFile))

	// index.json is the image index itself (what `crane push --index` pushes): one manifest per platform.
	var idx index
	raw, err := os.ReadFile(filepath.Join(dir, "index.json"))
	require.NoError(t, err)
	decode(t, raw, &idx)
	require.Equal(t, mediaIndex, idx.MediaType)

	platforms := map[string]descriptor{}
	for _, m := range idx.Manifests {
		require.NotNil(t, m.Platform, "every manifest of the index names its platform")
		require.Equal(t, mediaManifest, m.MediaType)
		platforms[m.Platform.OS+"/"+m.Platform.Architecture] = m
	}
	require.ElementsMatch(t, []string{"linux/amd64", "linux/arm64"}, keys(platforms))

	version := idx.Annotations["org.opencontainers.image.version"]
	revision := idx.Annotations["org.opencontainers.image.revision"]
	created := idx.Annotations["org.opencontainers.image.created"]
	require.NotEmpty(t, version, "the index carries the version annotation")
	require.NotEqual(t, "dev", version, "the version comes from git, never dev")
	require.Regexp(t, `^[0-9a-f]{40}$`, revision, "the revision is the full commit id")
	require.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`, created)
	require.True(t, strings.HasPrefix(idx.Annotations["org.opencontainers.image.source"], "https://"), "source is a URL")

	for plat, d := range platforms {
		t.Run(plat, func(t *testing.T) {
			arch := strings.TrimPrefix(plat, "linux/")
			var m manifest
			decode(t, blob(t, dir, d.Digest), &m)
			require.Equal(t, mediaConfig, m.Config.MediaType)
			var c config
			decode(t, blob(t, dir, m.Config.Digest), &c)
			require.Equal(t, "linux", c.OS)
			require.Equal(t, arch, c.Architecture)
			require.Equal(t, []string{"/patch-agent"}, c.Config.Entrypoint)
			require.Equal(t, []string{"run"}, c.Config.Cmd)
			require.Equal(t, "65532:65532", c.Config.User, "runs as the non-root user 65532")
			for _, k := range []string{"source", "revision", "version", "created"} {
				require.Equal(t, idx.Annotations["org.opencontainers.image."+k], c.Config.Labels["org.opencontainers.image."+k], "label %s", k)
			}

			require.Len(t, m.Layers, 1, "one layer on an empty base")
			require.Equal(t, mediaLayer, m.Layers[0].MediaType)
			hdrs, data := files(t, blob(t, dir, m.Layers[0].Digest))
			require.Contains(t, string(data["etc/ssl/certs/ca-certificates.crt"]), "-----BEGIN CERTIFICATE-----", "CA certificates for TLS to AWS")
			require.Contains(t, string(data["etc/passwd"]), ":65532:65532:")
			bin := hdrs["patch-agent"]
			require.NotNil(t, bin, "/patch-agent is in the layer")
			require.EqualValues(t, 0o755, bin.Mode&0o777)
			for name := range hdrs {
				require.Falsef(t, strings.HasPrefix(name, "usr/share/zoneinfo"), "no zone files: the binary embeds them (%s)", name)
			}

			path := filepath.Join(t.TempDir(), "patch-agent")
			require.NoError(t, os.WriteFile(path, data["patch-agent"], 0o755))
			f, err := elf.Open(path)
			require.NoError(t, err)
			require.Equal(t, elfMachine[arch], f.Machine, "ELF machine of %s", plat)
			for _, p := range f.Progs {
				require.NotEqual(t, elf.PT_INTERP, p.Type, "static: no program interpreter")
			}
			require.NoError(t, f.Close())
			bi, err := buildinfo.ReadFile(path)
			require.NoError(t, err)
			settings := map[string]string{}
			for _, s := range bi.Settings {
				settings[s.Key] = s.Value
			}
			require.Equal(t, "nodemo", settings["-tags"], "the production build leaves out the demo and the simulated account")
			require.Equal(t, "0", settings["CGO_ENABLED"])
			require.Equal(t, arch, settings["GOARCH"])

			if arch != runtime.GOARCH || runtime.GOOS != "linux" {
				return // checked by its ELF header only
			}
			out, err := exec.Command(path, "version").CombinedOutput()
			require.NoError(t, err, string(out))
			line := strings.TrimSpace(string(out))
			require.Regexp(t, regexp.MustCompile(`^patch-agent `+regexp.QuoteMeta(version)+` \(commit `+revision+`, built `+regexp.QuoteMeta(created)+`, go[0-9.]+, linux/`+arch+`\)$`), line)
		})
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
