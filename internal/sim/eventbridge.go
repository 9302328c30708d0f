package sim

import (
	"encoding/json"
	"fmt"
	"time"

	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// eventBridgeService is Amazon EventBridge: the events the agent published (observability.go) and the wake-up
// events RouteWakeUpEvents sent.
type eventBridgeService struct {
	*world

	publishedEvents []PublishedEvent
	wakeSent        map[string]int // by detail-type
}

// RouteWakeUpEvents makes the account send to queueURL, as EventBridge would through the stack's wake-up
// rules (cloudformation/patch-agent.yaml; docs/events.md, "Which events the stack routes"), the events that
// end a rollout's waits, from every change on:
//
//   - "EC2 Instance Launch Successful" (aws.autoscaling) when an instance of a group enters InService, and
//     "EC2 Instance Terminate Successful" when it is Terminated (Amazon EC2 Auto Scaling User Guide, "Amazon
//     EC2 Auto Scaling event reference": successful scaling events);
//   - "EC2 Instance State-change Notification" (aws.ec2) when an instance enters shutting-down or terminated
//     (Amazon EC2 User Guide, "State change events for Amazon EC2 instances");
//   - "ECS Container Instance State Change" (aws.ecs) when a container instance is DRAINING and its status or
//     its tasks changed, and when it is ACTIVE, connected and without a task running or pending after a
//     change of those (Amazon ECS Developer Guide, "Amazon ECS container instance state change events": a
//     registration, an agent connecting, a task placed or stopped).
//
// Events are sent once the account has settled after each change (OnChange), so they arrive no earlier than
// the state they announce is visible to the API. They take no randomness from the account: a world routes
// the same instances, tasks and tokens with or without them. Setup helper: not counted. Changes before the
// call send nothing.
func (s *eventBridgeService) RouteWakeUpEvents(queueURL string) {
	defer s.hold()()
	r := &wakeRouter{s: s, queue: queueURL}
	r.instances, r.cis = r.snapshot()
	s.watchers = append(s.watchers, func(*View) { r.changed() })
}

// WakeUpEventsSent returns how many wake-up events RouteWakeUpEvents sent so far, by detail-type.
func (s *eventBridgeService) WakeUpEventsSent() map[string]int {
	defer s.hold()()
	out := map[string]int{}
	for k, v := range s.wakeSent {
		out[k] = v
	}
	return out
}

// wakeRouter is the EventBridge rule of RouteWakeUpEvents: it watches the account's instances and container
// instances and sends an event to the queue on each change it matches.
type wakeRouter struct {
	s         *eventBridgeService
	queue     string
	seq       int
	instances map[string]instanceSeen
	cis       map[string]ciSeen
}

type instanceSeen struct{ lifecycle, ec2 string }

type ciSeen struct {
	status           string
	connected        bool
	running, pending int
	live             int // tasks not STOPPED
}

// snapshot reads what the events are sent on. Callers hold the lock.
func (r *wakeRouter) snapshot() (map[string]instanceSeen, map[string]ciSeen) {
	insts := make(map[string]instanceSeen, len(r.s.ec2.instances))
	for id, inst := range r.s.ec2.instances {
		insts[id] = instanceSeen{lifecycle: inst.state, ec2: string(inst.ec2State)}
	}
	cis := map[string]ciSeen{}
	for _, c := range r.s.ecs.clusters {
		for _, ci := range c.cis {
			cis[ci.arn] = ciSeen{status: ci.status, connected: ci.agentConnected}
		}
		for _, t := range c.tasks {
			if t.ci == nil {
				continue
			}
			s := cis[t.ci.arn]
			switch t.lastStatus {
			case taskRunning:
				s.running++
			case taskPending:
				s.pending++
			}
			if t.lastStatus != taskStopped {
				s.live++
			}
			cis[t.ci.arn] = s
		}
	}
	return insts, cis
}

// changed compares the account with the last snapshot and sends the events the stack's rules would deliver.
// Callers hold the lock (it runs as a watcher).
func (r *wakeRouter) changed() {
	insts, cis := r.snapshot()
	for _, id := range r.s.ec2.instanceOrder {
		now, before := insts[id], r.instances[id]
		if now == before {
			continue
		}
		inst := r.s.ec2.instance(id)
		if now.lifecycle == string(astypes.LifecycleStateInService) && before.lifecycle != now.lifecycle {
			r.scalingResult("EC2 Instance Launch Successful", inst.group, id, "Launching a new EC2 instance: "+id)
		}
		if now.ec2 != before.ec2 && (now.ec2 == string(ec2types.InstanceStateNameShuttingDown) || now.ec2 == string(ec2types.InstanceStateNameTerminated)) {
			r.send("aws.ec2", "EC2 Instance State-change Notification", []string{r.instanceARN(id)},
				map[string]any{"instance-id": id, "state": now.ec2})
		}
		if now.lifecycle == string(astypes.LifecycleStateTerminated) && before.lifecycle != now.lifecycle && inst.group != "" {
			r.scalingResult("EC2 Instance Terminate Successful", inst.group, id, "Terminating EC2 instance: "+id)
		}
	}
	for _, c := range r.s.ecs.clusters {
		for _, ci := range c.cis {
			now, before := cis[ci.arn], r.cis[ci.arn]
			if now == before {
				continue
			}
			draining := now.status == ciDraining
			registered := now.status == ciActive && now.connected && now.running == 0 && now.pending == 0
			if !draining && !registered {
				continue // task churn on an ACTIVE instance: no rule of the stack delivers it
			}
			r.send("aws.ecs", "ECS Container Instance State Change", []string{ci.arn}, map[string]any{
				"agentConnected": now.connected, "clusterArn": c.arn, "containerInstanceArn": ci.arn,
				"ec2InstanceId": ci.ec2ID, "status": now.status, "runningTasksCount": now.running,
				"pendingTasksCount": now.pending, "version": ci.version, "updatedAt": awsTime(r.s.now()),
			})
		}
	}
	r.instances, r.cis = insts, cis
}

func (r *wakeRouter) instanceARN(id string) string {
	return fmt.Sprintf("arn:aws:ec2:%s:%s:instance/%s", r.s.opts.Region, r.s.opts.AccountID, id)
}

// scalingResult sends an Auto Scaling successful scaling event for instance id of group.
func (r *wakeRouter) scalingResult(detailType, group, id, description string) {
	g := r.s.autoScaling.group(group)
	if g == nil {
		return
	}
	at := awsTime(r.s.now())
	r.send("aws.autoscaling", detailType, []string{g.arn, r.instanceARN(id)}, map[string]any{
		"StatusCode": "InProgress", "Description": description, "AutoScalingGroupName": group,
		"EC2InstanceId": id, "StatusMessage": "", "StartTime": at, "EndTime": at,
	})
}

// send puts one EventBridge event on the queue (an id from the router's own sequence, not the account's
// randomness). Callers hold the lock.
func (r *wakeRouter) send(source, detailType string, resources []string, detail map[string]any) {
	if r.s.sqs.queue(r.queue) == nil {
		return
	}
	r.seq++
	id := fmt.Sprintf("00000000-0000-4000-8000-%012d", r.seq)
	body, err := json.Marshal(map[string]any{"version": "0", "id": id, "detail-type": detailType, "source": source,
		"account": r.s.opts.AccountID, "time": r.s.now().UTC().Format(time.RFC3339), "region": r.s.opts.Region,
		"resources": resources, "detail": detail})
	if err != nil {
		return
	}
	r.s.sqs.deliver(r.queue, "wake-"+id, string(body))
	if r.s.wakeSent == nil {
		r.s.wakeSent = map[string]int{}
	}
	r.s.wakeSent[detailType]++
}
