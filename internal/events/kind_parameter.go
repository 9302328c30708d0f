package events

import (
	"encoding/json"
	"errors"
)

// parameterStoreDetail is the detail of a Parameter Store Change event.
type parameterStoreDetail struct {
	Operation   string `json:"operation"`
	Name        string `json:"name"`
	Type        string `json:"type"`
	DataType    string `json:"dataType"`
	Description string `json:"description"`
	Exception   string `json:"exception"`
}

// parameterChange converts a Parameter Store Change event (source aws.ssm) to KindParameterChange. Parameter
// Store sends one when a parameter in the account is created, updated, deleted or labelled. Shapes from "AWS
// Systems Manager User Guide: Setting up notifications or triggering actions based on Parameter Store events"
// and "Amazon EventBridge Events Reference: Systems Manager events" (Parameter Store Change).
//
// Sample (testdata/ssm-parameter-change-update-golden-ami.json):
//
//	{"version":"0","id":"9547ef2d-3b7e-4057-b6cb-5fdf09ee7c8f","detail-type":"Parameter Store Change",
//	 "source":"aws.ssm","account":"111122223333","time":"2024-05-22T16:44:48Z","region":"us-east-2",
//	 "resources":["arn:aws:ssm:us-east-2:111122223333:parameter/golden-ami/ecs/al2023"],
//	 "detail":{"operation":"Update","name":"/golden-ami/ecs/al2023","type":"String",
//	           "description":"Golden AMI for ECS hosts"}}
//
// A parameter created or updated with data type aws:ec2:image is validated asynchronously ("AWS Systems
// Manager User Guide: Native parameter support in Parameter Store for Amazon Machine Image IDs"). When the
// value is not an AMI the account can describe, the event carries "exception" (kept in
// ParameterChange.Exception) and the value must not be used
// (testdata/ssm-parameter-change-image-validation-failed.json):
//
//	"detail":{"exception":"Unable to Describe Resource","dataType":"aws:ec2:image","name":"MyGoldenAMI",
//	          "type":"String","operation":"Create"}
//
// detail.name is the name as Parameter Store spells it: hierarchical names keep their leading slash
// ("/golden-ami/ecs/al2023"), top-level names have none ("MyExampleParameter"). Public parameters
// (/aws/service/...) emit no such events into an account; the scheduled tick covers them.
//
// It fails when the detail has no name or no operation.
func parameterChange(ev *Event, detail json.RawMessage) error {
	var d parameterStoreDetail
	if err := json.Unmarshal(detail, &d); err != nil {
		return err
	}
	switch {
	case d.Name == "":
		return errors.New("detail.name (the parameter name) is missing")
	case d.Operation == "":
		return errors.New("detail.operation is missing")
	}
	ev.Kind = KindParameterChange
	ev.Parameter = &ParameterChange{
		Name:      d.Name,
		Operation: d.Operation,
		Type:      d.Type,
		DataType:  d.DataType,
		Exception: d.Exception,
	}
	return nil
}
