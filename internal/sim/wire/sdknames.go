package wire

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// names maps, per Go type name of an SDK input, output or data type, the Go field name to the wire name the
// SDK's own generated code uses for it. The EC2 query protocol names elements unlike the Go fields
// (Reservations is reservationSet, Image.State is imageState, DescribeInstancesInput.InstanceIds is the
// flattened InstanceId.N), and aws-sdk-go-v2/service/ec2 has no schemas to read them from at run time, so they
// are read from the module's generated serializers.go (request keys) and deserializers.go (answer elements).
type names struct {
	request  map[string]map[string]string // type -> field -> query key ("InstanceId", "Filter")
	response map[string]map[string]string // type -> field -> element ("reservationSet", "imageState")
}

var (
	ec2NamesOnce sync.Once
	ec2Names     *names
	ec2NamesErr  error
)

// ec2SDKNames reads the EC2 names from the aws-sdk-go-v2/service/ec2 module this binary was built with.
func ec2SDKNames() (*names, error) {
	ec2NamesOnce.Do(func() {
		ec2Names, ec2NamesErr = readSDKNames("github.com/aws/aws-sdk-go-v2/service/ec2", ec2.NewFromConfig, "awsEc2query")
	})
	return ec2Names, ec2NamesErr
}

// moduleDir returns the folder of module path's source at the version this binary was built with: where the
// compiler found fn (a function of the module's root package), else the module cache entry the build
// information names.
func moduleDir(path string, fn any) (string, error) {
	if f := runtime.FuncForPC(reflect.ValueOf(fn).Pointer()); f != nil {
		if file, _ := f.FileLine(f.Entry()); filepath.IsAbs(file) {
			if _, err := os.Stat(file); err == nil {
				return filepath.Dir(file), nil
			}
		}
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "", fmt.Errorf("no build information in this binary: cannot find module %s", path)
	}
	version := ""
	for _, d := range info.Deps {
		if d.Path == path {
			version = d.Version
			if d.Replace != nil {
				if filepath.IsAbs(d.Replace.Path) {
					return d.Replace.Path, nil
				}
				path, version = d.Replace.Path, d.Replace.Version
			}
		}
	}
	if version == "" {
		return "", fmt.Errorf("module %s is not a dependency of this binary", path)
	}
	cache := os.Getenv("GOMODCACHE")
	if cache == "" {
		out, err := exec.Command("go", "env", "GOMODCACHE").Output()
		if err != nil {
			return "", fmt.Errorf("go env GOMODCACHE: %w", err)
		}
		cache = strings.TrimSpace(string(out))
	}
	return filepath.Join(cache, path+"@"+version), nil
}

var (
	reDeserFunc = regexp.MustCompile(`^func %s_deserialize(?:Op)?Document\w*\(v \*\*(?:types\.)?(\w+),`)
	reCase      = regexp.MustCompile(`case strings\.EqualFold\("([^"]+)", t\.Name\.Local\)`)
	reSV        = regexp.MustCompile(`sv\.(\w+)`)
	reSerFunc   = regexp.MustCompile(`^func %s_serialize(?:Op)?Document\w*\(v \*(?:types\.)?(\w+), value`)
	reIfV       = regexp.MustCompile(`^\s*if v\.(\w+) `)
	reKey       = regexp.MustCompile(`object\.(?:Flat)?Key\("([^"]+)"\)`)
)

func readSDKNames(module string, fn any, prefix string) (*names, error) {
	dir, err := moduleDir(module, fn)
	if err != nil {
		return nil, err
	}
	n := &names{request: map[string]map[string]string{}, response: map[string]map[string]string{}}
	deser := regexp.MustCompile(strings.Replace(reDeserFunc.String(), "%s", prefix, 1))
	ser := regexp.MustCompile(strings.Replace(reSerFunc.String(), "%s", prefix, 1))
	// deserializers.go: in each function that reads a structure, `case strings.EqualFold("<element>", ...)`
	// is followed by the first assignment to sv.<Field>.
	if err := scan(filepath.Join(dir, "deserializers.go"), func(lines func() (string, bool)) {
		var typ, element string
		for line, ok := lines(); ok; line, ok = lines() {
			if strings.HasPrefix(line, "func ") {
				typ, element = "", ""
				if m := deser.FindStringSubmatch(line); m != nil {
					typ = m[1]
				}
				continue
			}
			if typ == "" {
				continue
			}
			if m := reCase.FindStringSubmatch(line); m != nil {
				element = m[1]
				continue
			}
			if element != "" {
				if m := reSV.FindStringSubmatch(line); m != nil {
					put(n.response, typ, m[1], element)
					element = ""
				}
			}
		}
	}); err != nil {
		return nil, err
	}
	// serializers.go: `if v.<Field> != nil {` is followed by `object.Key("<key>")` or FlatKey.
	if err := scan(filepath.Join(dir, "serializers.go"), func(lines func() (string, bool)) {
		var typ, field string
		for line, ok := lines(); ok; line, ok = lines() {
			if strings.HasPrefix(line, "func ") {
				typ, field = "", ""
				if m := ser.FindStringSubmatch(line); m != nil {
					typ = m[1]
				}
				continue
			}
			if typ == "" {
				continue
			}
			if m := reIfV.FindStringSubmatch(line); m != nil {
				field = m[1]
				continue
			}
			if field != "" {
				if m := reKey.FindStringSubmatch(line); m != nil {
					put(n.request, typ, field, m[1])
					field = ""
				}
			}
		}
	}); err != nil {
		return nil, err
	}
	if len(n.response) == 0 || len(n.request) == 0 {
		return nil, fmt.Errorf("no names read from the generated code of %s in %s", module, dir)
	}
	return n, nil
}

func put(m map[string]map[string]string, typ, field, wire string) {
	if m[typ] == nil {
		m[typ] = map[string]string{}
	}
	if _, ok := m[typ][field]; !ok {
		m[typ][field] = wire
	}
}

func scan(path string, fn func(lines func() (string, bool))) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("reading the SDK's generated code: %w", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	fn(func() (string, bool) {
		if !s.Scan() {
			return "", false
		}
		return s.Text(), true
	})
	return s.Err()
}
