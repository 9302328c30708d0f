// Command ociimage assembles the patch-agent container image without Docker, with go-containerregistry (the
// library crane is built on): for each platform one layer on an empty base holding the static binary, the CA
// certificates and an /etc/passwd naming the non-root user 65532; the image config (entrypoint, user, OCI
// labels); and an image index over the platforms, written as an OCI image layout directory (OCI Image
// Layout Specification) that `crane push --index DIR REF` pushes to any registry.
//
//	ociimage -out DIR -binary linux/amd64=PATH -binary linux/arm64=PATH -ca-certs /etc/ssl/certs/ca-certificates.crt \
//	  -label org.opencontainers.image.version=v1.2.3 ... -created 2026-12-01T09:00:00Z
//
// Labels follow the OCI image spec's pre-defined annotation keys (annotations.md): source, revision, version,
// created. The same keys are set as annotations on the index, so registries show them without the config.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// User is the uid and gid the agent runs as: "nonroot" of distroless and Chainguard images.
const User = "65532:65532"

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("ociimage", flag.ContinueOnError)
	out := fs.String("out", "", "OCI image layout directory to write (replaced)")
	caCerts := fs.String("ca-certs", "/etc/ssl/certs/ca-certificates.crt", "PEM bundle copied to /etc/ssl/certs/ca-certificates.crt")
	created := fs.String("created", "", "image creation time, RFC 3339 (also the files' modification time)")
	var binaries, labels multi
	fs.Var(&binaries, "binary", "OS/ARCH=PATH of the static binary for one platform (repeat per platform)")
	fs.Var(&labels, "label", "KEY=VALUE image label and index annotation (repeat)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || len(binaries) == 0 {
		return fmt.Errorf("-out and at least one -binary are required")
	}
	when := time.Unix(0, 0).UTC()
	if *created != "" {
		t, err := time.Parse(time.RFC3339, *created)
		if err != nil {
			return fmt.Errorf("-created %q: %w", *created, err)
		}
		when = t.UTC()
	}
	certs, err := os.ReadFile(*caCerts)
	if err != nil {
		return fmt.Errorf("CA certificates: %w (install ca-certificates, or pass -ca-certs)", err)
	}
	if !bytes.Contains(certs, []byte("BEGIN CERTIFICATE")) {
		return fmt.Errorf("CA certificates %s hold no PEM certificate", *caCerts)
	}
	lbl := map[string]string{}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return fmt.Errorf("-label %q: want KEY=VALUE", l)
		}
		lbl[k] = v
	}

	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, b := range binaries {
		plat, path, ok := strings.Cut(b, "=")
		osName, arch, ok2 := strings.Cut(plat, "/")
		if !ok || !ok2 {
			return fmt.Errorf("-binary %q: want OS/ARCH=PATH", b)
		}
		img, err := image(osName, arch, path, certs, lbl, when)
		if err != nil {
			return fmt.Errorf("image for %s: %w", plat, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: osName, Architecture: arch}}})
	}
	idx = mutate.Annotations(idx, lbl).(v1.ImageIndex)

	if err := os.RemoveAll(*out); err != nil {
		return err
	}
	if _, err := layout.Write(*out, idx); err != nil {
		return fmt.Errorf("writing OCI layout %s: %w", *out, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s@%s\n", *out, d)
	return nil
}

// image is one platform's image: an empty OCI base, one layer, the config.
func image(osName, arch, binPath string, certs []byte, labels map[string]string, when time.Time) (v1.Image, error) {
	bin, err := os.ReadFile(binPath)
	if err != nil {
		return nil, err
	}
	files := []file{
		{name: "etc/", dir: true, mode: 0o755},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "etc/ssl/", dir: true, mode: 0o755},
		{name: "etc/ssl/certs/", dir: true, mode: 0o755},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: certs},
		{name: "home/", dir: true, mode: 0o755},
		{name: "home/nonroot/", dir: true, mode: 0o700, uid: 65532},
		{name: "patch-agent", mode: 0o755, data: bin},
		{name: "tmp/", dir: true, mode: 0o1777},
	}
	layerTar, err := tarOf(files, when)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: when}, CreatedBy: "ociimage: patch-agent, CA certificates, /etc/passwd", Comment: "tools/ociimage"}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = osName, arch
	cf.Created = v1.Time{Time: when}
	cf.Config.Entrypoint = []string{"/patch-agent"}
	cf.Config.Cmd = []string{"run"}
	cf.Config.User = User
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"PATH=/", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
	cf.Config.Labels = labels
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, labels).(v1.Image), nil
}

type file struct {
	name string
	dir  bool
	mode int64
	uid  int
	data []byte
}

// tarOf writes files in name order with fixed times and owners, so a layer depends only on its contents.
func tarOf(files []file, when time.Time) ([]byte, error) {
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, ModTime: when, Uid: f.uid, Gid: f.uid, Format: tar.FormatPAX}
		if f.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
