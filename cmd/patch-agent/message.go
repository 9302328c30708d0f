package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/patch-agent/patch-agent/internal/events"
)

func newMessageCommand() *cobra.Command {
	msg := &cobra.Command{Use: "message", Short: "Work with queue messages"}
	inspect := &cobra.Command{
		Use:   "inspect [FILE|-]",
		Short: "Print how the agent reads one SQS message body",
		Long: `Parses one SQS message body (a file, or - / nothing for standard input) exactly as the agent does and
prints the event as JSON. Exit status: 0 when the message is recognised or deliberately ignored
(kind Unknown, TestNotification), 1 with a clear error when it is malformed — a malformed message is never
deleted by the agent and reaches the dead-letter queue.`,
		Example: `  patch-agent message inspect event.json
  aws sqs receive-message --queue-url "$Q" --query 'Messages[0].Body' --output text | patch-agent message inspect -`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var (
				body []byte
				err  error
			)
			if len(args) == 0 || args[0] == "-" {
				body, err = io.ReadAll(cmd.InOrStdin())
			} else {
				body, err = os.ReadFile(args[0])
			}
			if err != nil {
				return fmt.Errorf("reading message: %w", err)
			}
			ev, err := events.Parse(body)
			if err != nil {
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(ev)
		},
	}
	msg.AddCommand(inspect)
	return msg
}
