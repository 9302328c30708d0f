package sim

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
)

// PutParameterAt is PutParameter with the new version's LastModifiedDate set to at instead of the clock's now,
// for building a parameter's history of releases before the simulation starts. Setup helper: not counted.
// It panics when at is before the parameter's latest version (versions only go forward in time).
func (s *ssmService) PutParameterAt(name, value string, at time.Time) {
	defer s.lock()()
	p := s.params[name]
	if p == nil {
		p = &parameter{name: name}
		s.params[name] = p
	}
	if n := len(p.versions); n > 0 && at.Before(p.versions[n-1].modified) {
		panic("sim: parameter " + name + " version dated before its latest version")
	}
	p.versions = append(p.versions, parameterVersion{value: value, version: int64(len(p.versions) + 1), modified: at})
}

// GetParameterHistory returns every version of a parameter, oldest first, paged by MaxResults (1-50, default
// 50) and NextToken; each has Name, Type String, Value, Version, LastModifiedDate and DataType "text".
// AWS Systems Manager API Reference, "GetParameterHistory". Errors: ParameterNotFound, ValidationException.
func (c *SSMClient) GetParameterHistory(ctx context.Context, in *ssm.GetParameterHistoryInput, _ ...func(*ssm.Options)) (*ssm.GetParameterHistoryOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "ssm:GetParameterHistory")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil || deref(in.Name) == "" {
		return nil, apiError("ValidationException", "1 validation error detected: Value null at 'name' failed to satisfy constraint: Member must not be null")
	}
	limit := 50
	if in.MaxResults != nil {
		if *in.MaxResults < 1 || *in.MaxResults > 50 {
			return nil, apiError("ValidationException", "1 validation error detected: Value '%d' at 'maxResults' failed to satisfy constraint: Member must have value less than or equal to 50", *in.MaxResults)
		}
		limit = int(*in.MaxResults)
	}
	p := s.params[*in.Name]
	if p == nil || len(p.versions) == 0 {
		return nil, &ssmtypes.ParameterNotFound{Message: ptr("Parameter " + *in.Name + " not found.")}
	}
	start := 0
	if in.NextToken != nil {
		n, err := parseToken(*in.NextToken, "ph")
		if err != nil || n < 0 || n > len(p.versions) {
			return nil, &ssmtypes.InvalidNextToken{Message: ptr("The specified token is not valid.")}
		}
		start = n
	}
	out := &ssm.GetParameterHistoryOutput{Parameters: []ssmtypes.ParameterHistory{}}
	for i := start; i < len(p.versions); i++ {
		if len(out.Parameters) == limit {
			out.NextToken = ptr(makeToken("ph", i))
			break
		}
		v := p.versions[i]
		out.Parameters = append(out.Parameters, ssmtypes.ParameterHistory{
			Name:             ptr(p.name),
			Type:             ssmtypes.ParameterTypeString,
			Value:            ptr(v.value),
			Version:          v.version,
			LastModifiedDate: ptr(v.modified),
			DataType:         ptr("text"),
			Tier:             ssmtypes.ParameterTierStandard,
		})
	}
	return out, nil
}
