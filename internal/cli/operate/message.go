package operate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/events"
)

// MaxMessageBytes caps what `message inspect` reads: SQS message bodies are at most 256 KiB (bodies the
// extended client library keeps in S3, up to 2 GiB, arrive as a pointer and are not supported), so 1 MiB is
// generous and a wrong file (or /dev/zero) fails fast instead of filling memory.
const MaxMessageBytes = 1 << 20

// errMessageTooLarge is the error for input above MaxMessageBytes.
var errMessageTooLarge = errors.New("message larger than 1 MiB: SQS message bodies are at most 256 KiB " +
	"(bodies kept in S3 by the SQS extended client library are not supported)")

func NewMessageCommand() *cobra.Command {
	msg := &cobra.Command{
		Use:   "message",
		Short: "Work with queue messages",
		Args:  cli.SubcommandArgs,
		RunE:  cli.NeedsSubcommand,
	}
	var (
		topics  []string
		outFlag *cli.OutputValue
	)
	inspect := &cobra.Command{
		Use:   "inspect [FILE|-]",
		Short: "Print how the agent reads one SQS message body and what it would do with it",
		Long: `Parses one SQS message body (a file, or - / nothing for standard input) exactly as the agent does and
prints a JSON document: schemaVersion, the disposition — act (the agent acts, then deletes the message),
hold (a lifecycle action: held while the drain lasts, deleted once the action is completed), ignore (deleted
without acting; warning says when to look closer) or dead-letter (malformed: never acted on nor deleted, so
the redrive policy moves it to the dead-letter queue) — the action in words, with the checks the agent makes
with AWS first (it makes none here), a warning, the error, and the event (every field present, null when
not set). A body that names a member twice is malformed: JSON readers disagree about which one counts.
--topic ARN warns when a message came through SNS from another topic. JSON is the default here (the
document is what scripts read); -o table prints the disposition, action, warning and error one a line, and
-o wide adds the event's kind, source, group and time. The message is untrusted: a value with a control
character (an escape sequence, a line break) is printed quoted, with Go's escapes, and the JSON escapes every
character that is not printable.

Exit status: 0 when the message is recognised or deliberately ignored, 1 when it is malformed (the document
is printed first) or larger than 1 MiB (SQS bodies are at most 256 KiB; bodies kept in S3 by the SQS
extended client are not supported). Ctrl-C stops reading.`,
		Example: `  patch-agent message inspect event.json
  aws sqs receive-message --queue-url "$Q" --query 'Messages[0].Body' --output text | patch-agent message inspect -
  patch-agent message inspect dlq-message.json | jq -r '.disposition + ": " + .action'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkTopicARNs(topics); err != nil {
				return cli.Usage(cmd, err)
			}
			open := func() (io.ReadCloser, error) { return io.NopCloser(cmd.InOrStdin()), nil }
			if len(args) == 1 && args[0] != "-" {
				open = func() (io.ReadCloser, error) { return os.Open(args[0]) }
			}
			body, err := readMessage(cmd.Context(), open)
			if err != nil {
				return err
			}
			d := inspectMessage(body, topics)
			if outFlag.Is(cli.FormatJSON) {
				var doc bytes.Buffer
				if err := cli.WriteJSON(&doc, d); err != nil {
					return err
				}
				if _, err := cmd.OutOrStdout().Write(escapeUnprintable(doc.Bytes())); err != nil {
					return err
				}
			} else {
				printInspection(cmd.OutOrStdout(), d, outFlag.Is(cli.FormatWide))
			}
			if d.Disposition == DispositionDeadLetter {
				// d.Error is the parser's, which names the malformation after the same words.
				return fmt.Errorf("%w: %s", errMalformedMessage, Printable(strings.TrimPrefix(d.Error, events.ErrMalformed.Error()+": ")))
			}
			return nil
		},
	}
	outFlag = cli.AddOutputFlag(inspect, cli.FormatJSON, cli.StandardFormats, nil, "json is the default; table: disposition, action, warning, error; wide: and the event")
	inspect.Flags().StringSliceVar(&topics, "topic", nil, "`ARN` of an SNS topic the queue is meant to get notifications from (repeatable): warn when a message came from another")
	msg.AddCommand(inspect)
	return msg
}

// snsTopicARN matches an SNS topic ARN: arn:PARTITION:sns:REGION:ACCOUNT:NAME, the account 12 digits, the name
// 1 to 256 letters, digits, hyphens and underscores (a FIFO topic's ending in .fifo), as SNS names them.
var snsTopicARN = regexp.MustCompile(`^arn:aws[a-z-]*:sns:[a-z]{2}(-[a-z]+)+-\d+:\d{12}:[A-Za-z0-9_-]{1,256}(\.fifo)?$`)

// checkTopicARNs returns an error naming the first of topics (--topic) that is not an SNS topic ARN.
func checkTopicARNs(topics []string) error {
	for _, t := range topics {
		if !snsTopicARN.MatchString(t) {
			return fmt.Errorf("--topic %q is not an SNS topic ARN: arn:<partition>:sns:<region>:<12-digit account>:<topic name>, "+
				"e.g. arn:aws:sns:us-east-1:111122223333:asg-lifecycle (`aws sns list-topics` lists them)", t)
		}
	}
	return nil
}

// printInspection writes d one field a line: disposition, action, warning and error (those set), and with
// wide the event's kind, envelope, source, detail type, group and time. Every value is printable: the
// message is untrusted (a dead-letter queue's body, say), and its strings are in the action, the warning and
// the error as well as in the event.
func printInspection(w io.Writer, d InspectDocument, wide bool) {
	line := func(name, v string) {
		if v != "" {
			fmt.Fprintf(w, "%-12s %s\n", name+":", Printable(v))
		}
	}
	line("disposition", d.Disposition)
	line("action", d.Action)
	line("warning", d.Warning)
	line("error", d.Error)
	if ev := d.Event; wide && ev != nil {
		line("kind", string(ev.Kind))
		line("envelope", string(ev.Envelope))
		line("source", ev.Source)
		line("detail type", ev.DetailType)
		line("group", ev.Group)
		if ev.Time != nil {
			line("time", ev.Time.Format(time.RFC3339))
		}
	}
}

// Printable returns s as it is when it is valid UTF-8 and every character is printable (strconv.IsPrint:
// letters, marks, numbers, punctuation, symbols and the ASCII space), else s quoted with Go's escapes
// (strconv.Quote). A message's strings are untrusted: a control character, an escape sequence ("\x1b[2J"
// clears the screen), a line break that forges another line or a bidirectional override must reach the
// operator's terminal as text, not as a command to it. Ordinary names print unchanged.
func Printable(s string) string {
	if utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) < 0 {
		return s
	}
	return strconv.Quote(s)
}

// escapeUnprintable returns doc, JSON from encoding/json, with every character that is neither printable
// (strconv.IsPrint) nor a line feed written as a \uXXXX escape (a UTF-16 surrogate pair beyond U+FFFF).
// encoding/json escapes U+0000-U+001F, U+2028 and U+2029 but writes DEL, the C1 controls (U+009B is CSI to
// some terminals) and the bidirectional overrides as they are. Outside strings encoding/json writes only
// printable ASCII and line feeds, so every escape lands inside a string, and the document decodes to the
// same values.
func escapeUnprintable(doc []byte) []byte {
	out := make([]byte, 0, len(doc))
	for len(doc) > 0 {
		r, n := utf8.DecodeRune(doc)
		switch {
		case r == '\n' || strconv.IsPrint(r) && !(r == utf8.RuneError && n == 1):
			out = append(out, doc[:n]...)
		case r > 0xFFFF:
			r1, r2 := utf16.EncodeRune(r)
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		default:
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		doc = doc[n:]
	}
	return out
}

// readMessage opens the input and reads at most MaxMessageBytes from it (errMessageTooLarge beyond). Opening
// and reading run in a goroutine so that ctx's cancellation (Ctrl-C) returns at once (exit status 130), even
// while a terminal, a pipe or a FIFO has nothing to read; the goroutine is left blocked, which is fine for a
// process about to exit.
func readMessage(ctx context.Context, open func() (io.ReadCloser, error)) ([]byte, error) {
	type result struct {
		body []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		in, err := open()
		if err != nil {
			done <- result{nil, err}
			return
		}
		defer in.Close()
		body, err := io.ReadAll(io.LimitReader(in, MaxMessageBytes+1))
		done <- result{body, err}
	}()
	select {
	case <-ctx.Done():
		return nil, cli.ExitError{Code: 130, Err: errors.New("aborted: no message read")}
	case r := <-done:
		switch {
		case r.err != nil:
			return nil, fmt.Errorf("reading message: %w", r.err)
		case len(r.body) > MaxMessageBytes:
			return nil, errMessageTooLarge
		}
		return r.body, nil
	}
}
