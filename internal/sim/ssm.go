package sim

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// ssmService is AWS Systems Manager Parameter Store: parameters and their history (ssmhistory.go).
type ssmService struct {
	*world

	params map[string]*parameter
}

// parameter is a String parameter with its history of versions.
type parameter struct {
	name     string
	versions []parameterVersion // versions[i].version == i+1
}

type parameterVersion struct {
	value    string
	version  int64
	modified time.Time
}

// PutParameter creates or overwrites a String parameter: its Version goes up by one (starting at 1) and its
// LastModifiedDate is the clock's now. Public parameters (/aws/service/...) are simulated the same way.
// AWS Systems Manager User Guide, "Working with parameter versions". Setup helper: not counted.
func (s *ssmService) PutParameter(name, value string) {
	defer s.lock()()
	p := s.params[name]
	if p == nil {
		p = &parameter{name: name}
		s.params[name] = p
	}
	p.versions = append(p.versions, parameterVersion{value: value, version: int64(len(p.versions) + 1), modified: s.now()})
}

// DeleteParameter deletes a parameter and its whole history, as DeleteParameter does: GetParameters then lists
// its name in InvalidParameters, and a later PutParameter creates it anew at Version 1. AWS Systems Manager API
// Reference, "DeleteParameter" and "GetParameters". Setup helper: not counted. Deleting a parameter that does
// not exist does nothing (the API answers ParameterNotFound; a setup helper has no caller to tell).
func (s *ssmService) DeleteParameter(name string) {
	defer s.lock()()
	delete(s.params, name)
}

// SSMClient is the simulated AWS Systems Manager Parameter Store API. It implements awsapi.SSM.
type SSMClient struct{ s *ssmService }

var _ awsapi.SSM = (*SSMClient)(nil)

func (s *ssmService) parameterARN(name string) string {
	account := s.opts.AccountID
	if strings.HasPrefix(name, "/aws/service/") {
		account = "" // public parameters are owned by AWS
	}
	if !strings.HasPrefix(name, "/") {
		name = "/" + name
	}
	return fmt.Sprintf("arn:aws:ssm:%s:%s:parameter%s", s.opts.Region, account, name)
}

// GetParameters returns up to 10 parameters by name (a name may carry a ":<version>" selector); names that do
// not exist are listed in InvalidParameters. Each parameter has Name, Type String, Value, Version,
// LastModifiedDate, ARN and DataType "text".
// AWS Systems Manager API Reference, "GetParameters". Errors: ValidationException (no names, more than 10).
func (c *SSMClient) GetParameters(ctx context.Context, in *ssm.GetParametersInput, _ ...func(*ssm.Options)) (*ssm.GetParametersOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "ssm:GetParameters")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil || len(in.Names) == 0 {
		return nil, apiError("ValidationException", "1 validation error detected: Value null at 'names' failed to satisfy constraint: Member must not be null")
	}
	if len(in.Names) > 10 {
		return nil, apiError("ValidationException", "1 validation error detected: Value '[%s]' at 'names' failed to satisfy constraint: Member must have length less than or equal to 10", strings.Join(in.Names, ", "))
	}
	out := &ssm.GetParametersOutput{Parameters: []ssmtypes.Parameter{}, InvalidParameters: []string{}}
	for _, ref := range in.Names {
		name, selector := ref, ""
		if i := strings.LastIndex(ref, ":"); i > 0 {
			name, selector = ref[:i], ref[i:]
		}
		p := s.params[name]
		if p == nil || len(p.versions) == 0 {
			out.InvalidParameters = append(out.InvalidParameters, ref)
			continue
		}
		v := p.versions[len(p.versions)-1]
		if selector != "" {
			n, err := strconv.ParseInt(selector[1:], 10, 64)
			if err != nil || n < 1 || n > int64(len(p.versions)) {
				out.InvalidParameters = append(out.InvalidParameters, ref)
				continue
			}
			v = p.versions[n-1]
		}
		param := ssmtypes.Parameter{
			Name:             ptr(p.name),
			Type:             ssmtypes.ParameterTypeString,
			Value:            ptr(v.value),
			Version:          v.version,
			LastModifiedDate: ptr(v.modified),
			ARN:              ptr(s.parameterARN(p.name)),
			DataType:         ptr("text"),
		}
		if selector != "" {
			param.Selector = ptr(selector)
		}
		out.Parameters = append(out.Parameters, param)
	}
	return out, nil
}

// parameter returns the named parameter, or nil.
func (s *ssmService) parameter(name string) *parameter { return s.params[name] }
