package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	smithylogging "github.com/aws/smithy-go/logging"
	"github.com/spf13/cobra"

	"github.com/patch-agent/patch-agent/internal/config"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/state"
)

// StoreFlags select the store an operator command reads and writes: the agent's DynamoDB table (--table,
// --region, credentials from the default chain) or a state snapshot file (--state-file), exactly one.
type StoreFlags struct {
	cmd       *cobra.Command
	table     string
	Region    string
	stateFile string
	// Regions are every --region given (the organization-wide forms run in each); Profile is --profile.
	Regions []string
	Profile string
}

// AddStoreFlags registers --table, --region and --state-file on cmd; --table and --region default to
// PATCH_AGENT_TABLE and AWS_REGION.
func AddStoreFlags(cmd *cobra.Command) *StoreFlags {
	d := config.Default()
	f := &StoreFlags{cmd: cmd, table: d.Table, Region: d.Region}
	fl := cmd.Flags()
	fl.StringVar(&f.table, "table", f.table, "the agent's DynamoDB table (env "+config.EnvTable+")")
	fl.Var(NewRegionsValue(&f.Region, &f.Regions), "region", "AWS region of the table (env "+config.EnvRegion+")")
	AddProfileFlag(fl, &f.Profile)
	fl.StringVar(&f.stateFile, "state-file", "", "use the state snapshot `FILE` instead of DynamoDB (written by patch-agent demo --state-file)")
	return f
}

// OpenedStore is the store a command works on.
type OpenedStore struct {
	state.Store
	// Where names the store for messages: "table T (region R)" or "state file F".
	Where string
	// Mem and path are set for a state file.
	Mem  *state.Memory
	path string
	// Groups confirms group names with Auto Scaling; nil for a state file.
	Groups operator.GroupsAPI
	// AWS is the AWS configuration of a DynamoDB store (nil for a state file): the approve command asks STS
	// with it who is acting.
	AWS *aws.Config
}

// ConfirmGroup fails when group names no group the agent could act on, so that a misspelt name cannot leave
// the fleet rolling. With the agent's table, Auto Scaling must know the group and it must carry the opt-in
// tag (operator.ConfirmGroup), rollout record or not; a state file has no Auto Scaling behind it, so it must
// hold the group's rollout record. An unknown name is answered with the groups the store holds rollout
// records of (the names status lists). Errors wrap operator.ErrUnknownGroup or operator.ErrNotOptedIn.
// Every command that takes a group checks it here: pause and resume before they write, the others when the
// store has no record of the group (ExplainNotFound).
func (s *OpenedStore) ConfirmGroup(ctx context.Context, group string) error {
	if s.Groups != nil {
		err := operator.ConfirmGroup(ctx, s.Groups, group)
		if errors.Is(err, operator.ErrUnknownGroup) {
			return fmt.Errorf("%w%s", err, s.knownGroups(ctx))
		}
		return err
	}
	_, err := s.GetRollout(ctx, group)
	if !errors.Is(err, state.ErrNotFound) {
		return err
	}
	return fmt.Errorf("%w named %s in %s%s", operator.ErrUnknownGroup, group, s.Where, s.knownGroups(ctx))
}

// maxKnownGroups caps the group names an unknown-group error lists.
const maxKnownGroups = 20

// knownGroups is the tail of an unknown-group error: "; the groups it holds records of: a, b" (at most
// maxKnownGroups names, sorted), "; it holds no rollout record" when there are none, "" when they cannot be
// listed.
func (s *OpenedStore) knownGroups(ctx context.Context) string {
	rs, err := s.ListRollouts(ctx)
	if err != nil {
		return ""
	}
	if len(rs) == 0 {
		return fmt.Sprintf("; %s holds no rollout record", s.Where)
	}
	names := make([]string, 0, len(rs))
	for _, r := range rs {
		names = append(names, r.Group)
	}
	slices.Sort(names)
	more := ""
	if len(names) > maxKnownGroups {
		more = fmt.Sprintf(" and %d more (patch-agent status lists them)", len(names)-maxKnownGroups)
		names = names[:maxKnownGroups]
	}
	return fmt.Sprintf("; %s holds rollout records of: %s%s", s.Where, strings.Join(names, ", "), more)
}

// ExplainNotFound turns err, when it says the store has no record of group (state.ErrNotFound), into
// ConfirmGroup's answer: the group is unknown (with the real names) or not opted in. A group Auto Scaling
// knows and that is opted in keeps err (the agent has not written its record yet); when Auto Scaling cannot
// be asked (status and history need no Auto Scaling permission), err gets the names the store holds. Other
// errors, and a group "", are returned as they are.
func (s *OpenedStore) ExplainNotFound(ctx context.Context, group string, err error) error {
	if group == "" || !errors.Is(err, state.ErrNotFound) {
		return err
	}
	cerr := s.ConfirmGroup(ctx, group)
	switch {
	case cerr == nil:
		return err
	case errors.Is(cerr, operator.ErrUnknownGroup) || errors.Is(cerr, operator.ErrNotOptedIn):
		return cerr
	}
	return fmt.Errorf("%w%s", err, s.knownGroups(ctx))
}

// errNoStore is returned when neither --table nor --state-file says which store to use.
var errNoStore = fmt.Errorf("no store given: pass --table NAME (or set %s) for the agent's DynamoDB table, "+
	"or --state-file FILE for a snapshot written by `patch-agent demo --state-file FILE`", config.EnvTable)

// Open returns the selected store. Errors: neither or both given, the snapshot unreadable, or AWS
// configuration that cannot be loaded (no region).
func (f *StoreFlags) Open(ctx context.Context) (*OpenedStore, error) {
	explicitTable := f.cmd.Flags().Changed("table")
	switch {
	case f.stateFile != "" && explicitTable:
		return nil, Usage(f.cmd, errors.New("--table and --state-file are exclusive: use the agent's DynamoDB table or a state file, not both"))
	case f.stateFile != "":
		mem, err := LoadSnapshot(f.stateFile)
		if err != nil {
			return nil, err
		}
		return &OpenedStore{Store: mem, Where: "state file " + f.stateFile, Mem: mem, path: f.stateFile}, nil
	case strings.TrimSpace(f.table) == "":
		return nil, Usage(f.cmd, errNoStore)
	}
	if err := OneRegion(f.cmd, f.Regions); err != nil {
		return nil, err
	}
	awsCfg, err := LoadAWSConfig(ctx, f.Profile, f.Region, 0, RegionRequired("the region of table "+f.table))
	if err != nil {
		return nil, err
	}
	return &OpenedStore{Store: state.NewDynamoDB(dynamodb.NewFromConfig(awsCfg), f.table),
		Where: fmt.Sprintf("table %s (region %s)", f.table, awsCfg.Region), Groups: autoscaling.NewFromConfig(awsCfg), AWS: &awsCfg}, nil
}

// QuietSDK keeps the SDK's own log lines (such as the IMDS client's "falling back to IMDSv1" warning when
// credentials are looked up off EC2) out of a command's stderr: what fails reaches the user as the
// command's error, with its context.
var QuietSDK = awsconfig.WithLogger(smithylogging.Nop{})

// Reload re-reads a state file (a watch sees the file as it changes); a DynamoDB store always reads fresh.
func (s *OpenedStore) Reload() error {
	if s.Mem == nil {
		return nil
	}
	mem, err := LoadSnapshot(s.path)
	if err != nil {
		return err
	}
	s.Store, s.Mem = mem, mem
	return nil
}

// Save writes a state file back after a change; DynamoDB writes are already durable.
func (s *OpenedStore) Save() error {
	if s.Mem == nil {
		return nil
	}
	return SaveSnapshot(s.path, s.Mem)
}

// LoadSnapshot reads a state snapshot file. An error names the file and what is wrong with it: missing or
// empty (with the command that writes one), not JSON, cut short, or JSON that is not a snapshot (with the line
// and column), or what state.LoadMemory refuses in a snapshot.
func LoadSnapshot(path string) (*state.Memory, error) {
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("state file %s does not exist: write one with `patch-agent demo --state-file %s`", path, ShellQuote(path))
	case err != nil:
		return nil, fmt.Errorf("reading state file: %w", err)
	case len(bytes.TrimSpace(b)) == 0:
		return nil, fmt.Errorf("state file %s is empty: it holds no state snapshot; `patch-agent demo --state-file %s` writes one", path, ShellQuote(path))
	}
	mem, err := state.LoadMemory(bytes.NewReader(b))
	if err != nil {
		return nil, snapshotError(path, b, err)
	}
	return mem, nil
}

// snapshotError says what is wrong with the state file path holding b, which state.LoadMemory refused with err:
// a JSON error with its line and column, in words rather than Go types; any other error as it is.
func snapshotError(path string, b []byte, err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Errorf("state file %s is not JSON: %s: %s", path, position(b, syntax.Offset), syntax)
	case errors.Is(err, io.ErrUnexpectedEOF):
		line, _ := lineColumn(b, int64(len(b)))
		return fmt.Errorf("state file %s ends inside its JSON (line %d): the file is cut short", path, line)
	case errors.As(err, &typ):
		what := fmt.Sprintf("a JSON %s where %s belongs", typ.Value, jsonKind(typ.Type.Kind()))
		if typ.Field != "" {
			what = "field " + typ.Field + " holds " + what
		}
		return fmt.Errorf("state file %s is not a state snapshot: %s: %s", path, position(b, typ.Offset), what)
	}
	return fmt.Errorf("state file %s: %w", path, err)
}

// position is "line L, column C" of the byte at offset (1-based, as the JSON decoder counts: the error is
// after offset bytes) in b.
func position(b []byte, offset int64) string {
	line, col := lineColumn(b, offset)
	return fmt.Sprintf("line %d, column %d", line, col)
}

// lineColumn returns the line and column (1-based) of the offset-th byte of b.
func lineColumn(b []byte, offset int64) (line, col int) {
	offset = min(max(offset, 1), int64(len(b)))
	before := b[:offset-1]
	line = bytes.Count(before, []byte("\n")) + 1
	return line, len(before) - bytes.LastIndexByte(before, '\n')
}

// jsonKind names the JSON value a Go kind is read from: "an object", "an array", "a string", "a number", "a
// boolean".
func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	}
	return "a number"
}

// SaveSnapshot writes the memory store to path atomically: a temporary file in the same directory, renamed
// over path, so a reader never sees half a snapshot.
func SaveSnapshot(path string, mem *state.Memory) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("saving state file %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing left to remove
	mode := fs.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	err = mem.Save(tmp)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), mode)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("saving state file %s: %w", path, err)
	}
	return nil
}

// defaultWho names the operator in pause locks, approvals and history: $USER@hostname.
func defaultWho() string {
	name := os.Getenv("USER")
	if name == "" {
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
	}
	host, _ := os.Hostname()
	switch {
	case name == "":
		return ""
	case host == "":
		return name
	}
	return name + "@" + host
}

// AddWhoFlag registers --who (default $USER@hostname).
func AddWhoFlag(cmd *cobra.Command, who *string) {
	cmd.Flags().StringVar(who, "who", defaultWho(), "who is acting, recorded with the change")
}

// RequireWho returns a clear error when --who is empty: given empty, or defaulted from no $USER.
func RequireWho(cmd *cobra.Command, who string) error {
	switch {
	case strings.TrimSpace(who) != "":
		return nil
	case cmd.Flags().Changed("who"):
		return Usage(cmd, errors.New("--who is empty: say who is acting (e.g. --who alice@example.com); it is recorded with the change"))
	}
	return Usage(cmd, errors.New("--who is required: $USER is not set, so say who is acting (e.g. --who alice@example.com)"))
}

// errNoGroup is the error of a command that needs a GROUP argument and got none.
var errNoGroup = errors.New("GROUP is required: the Auto Scaling group name (see patch-agent status)")

// GroupArg is the Args of commands that take exactly one GROUP argument.
func GroupArg(cmd *cobra.Command, args []string) error {
	switch {
	case len(args) == 0 || len(args) == 1 && strings.TrimSpace(args[0]) == "":
		return errNoGroup
	case len(args) > 1:
		err := fmt.Errorf("%s takes one GROUP, got %d arguments: %q", cmd.CommandPath(), len(args), args)
		if f := cmd.Flags().Lookup("reason"); f != nil && f.Changed {
			// --reason CVE fix now: the words after the first are taken as arguments.
			err = fmt.Errorf("%w; quote a reason of several words: --reason %s", err, ShellQuote(strings.Join(append([]string{f.Value.String()}, args[1:]...), " ")))
		}
		return err
	}
	return nil
}

// IsTerminal reports whether r or w is an interactive terminal: a character device other than the null
// device (a test's or a service's stdin is often /dev/null, which is a character device too).
func IsTerminal(v any) bool {
	f, ok := v.(*os.File)
	if !ok || f == nil {
		return false
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	if null, err := os.Stat(os.DevNull); err == nil && os.SameFile(fi, null) {
		return false
	}
	return true
}

// WriteJSON writes v as indented JSON.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
