package events

import "encoding/json"

// scheduledTick converts a Scheduled Event to KindScheduledTick. An EventBridge schedule rule (rate or cron
// expression, source aws.events) sends one to its target each time it fires; the detail is always empty.
// Shape from "Amazon EventBridge User Guide: Creating a rule that runs on a schedule in Amazon EventBridge"
// and the Scheduled Event example in "Amazon EventBridge Events Reference: Events from AWS services".
//
// Sample (testdata/scheduled-event.json):
//
//	{"version":"0","account":"111122223333","region":"us-east-2","detail":{},"detail-type":"Scheduled Event",
//	 "source":"aws.events","time":"2019-03-01T01:23:45Z","id":"cdc73f9d-aea9-11e3-9d5a-835b769c0d9c",
//	 "resources":["arn:aws:events:us-east-2:111122223333:rule/my-schedule"]}
//
// The agent resolves every tracked parameter on each tick: public parameters (/aws/service/...) emit no
// change events into an account, so the tick is how their new AMIs are seen.
func scheduledTick(ev *Event, _ json.RawMessage) error {
	ev.Kind = KindScheduledTick
	return nil
}
