package sim

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	awseks "github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// eksService is Amazon EKS: clusters (created on first use), managed node groups (eksnodegroups.go), Fargate
// profiles (eksfargate.go) and the updates, add-ons, insights and node AMI releases the upgrade calls see
// (eksupgrade.go, eksnodegroupupdate.go).
type eksService struct {
	*world

	eksClusters     map[string]*eksCluster                         // by name
	nodegroups      map[string]map[string]*nodegroup               // EKS cluster name -> node group name -> node group
	fargateProfiles map[string]map[string]*ekstypes.FargateProfile // cluster -> name -> profile
	eksUpgrades     *eksUpgradeState
}

// eksCluster is an Amazon EKS cluster: only what DescribeCluster reports. Its nodes are not simulated here:
// tests and the demo run a Kubernetes API (envtest, or client-go's fake clientset) beside the account.
type eksCluster struct {
	name, arn, version, endpoint, caData string
	createdAt                            time.Time
}

// CreateEKSCluster creates an ACTIVE EKS cluster whose control plane runs Kubernetes version ("1.31"; any
// string, so tests can give "" or "undefined"). Setup helper: not counted.
func (s *eksService) CreateEKSCluster(name, version string) {
	defer s.lock()()
	if s.eksClusters == nil {
		s.eksClusters = map[string]*eksCluster{}
	}
	id := strings.ToUpper(s.hex(32))
	pem := "-----BEGIN CERTIFICATE-----\nMIIC/jCCAeagAwIBAgIBADANBgkqhkiG9w0BAQsFADAVMRMwEQYDVQQDEwprdWJl\n-----END CERTIFICATE-----\n"
	s.eksClusters[name] = &eksCluster{
		name:      name,
		arn:       fmt.Sprintf("arn:aws:eks:%s:%s:cluster/%s", s.opts.Region, s.opts.AccountID, name),
		version:   version,
		endpoint:  fmt.Sprintf("https://%s.gr7.%s.eks.amazonaws.com", id, s.opts.Region),
		caData:    base64.StdEncoding.EncodeToString([]byte(pem)),
		createdAt: s.now(),
	}
}

// SetEKSClusterVersion changes a cluster's Kubernetes version, as a control plane upgrade does
// (UpdateClusterVersion once it finished). It panics when the cluster does not exist. Setup helper.
func (s *eksService) SetEKSClusterVersion(name, version string) {
	defer s.lock()()
	c := s.eksClusters[name]
	if c == nil {
		panic("sim: no EKS cluster " + name)
	}
	c.version = version
}

// ImageUnhealthy reports whether MarkImageUnhealthy was called for the image: instances launched from it
// never become healthy (for EKS, a simulated kubelet never reports the node Ready).
func (s *ec2Service) ImageUnhealthy(imageID string) bool {
	defer s.lock()()
	return s.unhealthyImages[imageID]
}

// EKS returns the account's Amazon EKS API.
func (a *Account) EKS() awsapi.EKS { return &EKSClient{s: a.eks} }

// EKSClient is the simulated Amazon EKS API. It implements awsapi.EKS.
type EKSClient struct{ s *eksService }

var _ awsapi.EKS = (*EKSClient)(nil)

// DescribeCluster describes a cluster: name, ARN, version, endpoint, certificate authority, status ACTIVE
// (UPDATING while a version update runs, eksupgrade.go).
// Amazon EKS API Reference, "DescribeCluster". Errors: ResourceNotFoundException.
func (c *EKSClient) DescribeCluster(ctx context.Context, in *awseks.DescribeClusterInput, _ ...func(*awseks.Options)) (*awseks.DescribeClusterOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "eks:DescribeCluster")
	if err != nil {
		return nil, err
	}
	defer unlock()
	name := deref(in.Name)
	cl := s.eksClusters[name]
	if cl == nil {
		return nil, &ekstypes.ResourceNotFoundException{Message: ptr("No cluster found for name: " + name + "."), ClusterName: ptr(name)}
	}
	out := &ekstypes.Cluster{
		Name:                 ptr(cl.name),
		Arn:                  ptr(cl.arn),
		Endpoint:             ptr(cl.endpoint),
		CertificateAuthority: &ekstypes.Certificate{Data: ptr(cl.caData)},
		Status:               s.eksClusterStatusLocked(cl.name),
		PlatformVersion:      ptr("eks.1"),
		CreatedAt:            ptr(cl.createdAt),
	}
	if cl.version != "" {
		out.Version = ptr(cl.version)
	}
	return &awseks.DescribeClusterOutput{Cluster: out}, nil
}
