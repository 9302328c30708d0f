package providers

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/model"
)

// maxParametersPerCall is the GetParameters limit (AWS Systems Manager API Reference: GetParameters, "Names":
// "Array Members: Minimum number of 1 item. Maximum number of 10 items.").
const maxParametersPerCall = 10

var amiIDPattern = regexp.MustCompile(`^ami-[0-9a-f]{8}([0-9a-f]{9})?$`)

// ParseParameterValue extracts the AMI id from an SSM parameter value. Two shapes exist: a plain image id
// (".../image_id" parameters and most golden-AMI parameters: "ami-0e3c5a2f1d8b7a6c4"), and the JSON document
// of the ".../recommended" parameters of the ECS- and EKS-optimized AMIs
// ({"image_id":"ami-...","image_name":"...",...}; Amazon ECS Developer Guide: "Retrieving Amazon ECS-optimized
// Linux AMI metadata"). It returns an error naming the problem for anything else.
func ParseParameterValue(value string) (imageID, imageName string, err error) {
	v := strings.TrimSpace(value)
	if strings.HasPrefix(v, "{") {
		var doc struct {
			ImageID   string `json:"image_id"`
			ImageName string `json:"image_name"`
		}
		if err := json.Unmarshal([]byte(v), &doc); err != nil {
			return "", "", fmt.Errorf("parameter value looks like JSON but does not parse: %w", err)
		}
		if doc.ImageID == "" {
			return "", "", fmt.Errorf("parameter value is a JSON document without image_id")
		}
		v, imageName = doc.ImageID, doc.ImageName
	}
	if !amiIDPattern.MatchString(v) {
		return "", "", fmt.Errorf("parameter value %q is not an AMI id (ami- followed by 8 or 17 hex digits)", Truncate(v, 40))
	}
	return v, imageName, nil
}

// Resolver reads AMI parameters from Parameter Store.
type Resolver struct {
	SSM awsapi.SSM
}

// Resolve reads every named parameter with GetParameters, 10 names per call, and returns the AMI each names,
// keyed by parameter name. Parameters that do not exist are returned in missing; a parameter whose value is
// not an AMI id is an error in invalid (keyed by name). A failed call is returned as err.
func (r Resolver) Resolve(ctx context.Context, names []string) (found map[string]model.ResolvedAMI, missing []string, invalid map[string]error, err error) {
	found, invalid = map[string]model.ResolvedAMI{}, map[string]error{}
	uniq := dedupeSorted(names)
	for start := 0; start < len(uniq); start += maxParametersPerCall {
		batch := uniq[start:min(start+maxParametersPerCall, len(uniq))]
		out, err := r.SSM.GetParameters(ctx, &ssm.GetParametersInput{Names: batch})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("reading AMI parameters %s: %w", strings.Join(batch, ", "), err)
		}
		for _, p := range out.Parameters {
			name := aws.ToString(p.Name)
			id, imageName, perr := ParseParameterValue(aws.ToString(p.Value))
			if perr != nil {
				invalid[name] = fmt.Errorf("parameter %s version %d: %w", name, p.Version, perr)
				continue
			}
			found[name] = model.ResolvedAMI{Parameter: name, ImageID: id, ImageName: imageName, Version: p.Version,
				LastModified: aws.ToTime(p.LastModifiedDate)}
		}
		missing = append(missing, out.InvalidParameters...)
	}
	return found, missing, invalid, nil
}

func dedupeSorted(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

// Truncate returns s cut to at most n bytes followed by "..." when it is longer (a status reason or an AWS
// answer quoted in one), never splitting a UTF-8 character.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
