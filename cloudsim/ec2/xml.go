package ec2

import (
	"encoding/xml"
	"time"
)

// The response documents. Element names are the locationNames the SDK's
// deserializers (service/ec2 deserializers.go) look for; lists are
// <name><item>...</item></name>.

const xmlns = "http://ec2.amazonaws.com/doc/2016-11-15/"

// apiError is an EC2 error answer.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.code + ": " + e.msg }

// errorDoc is EC2's error body (aws/protocol/ec2query reads it).
type errorDoc struct {
	XMLName   xml.Name `xml:"Response"`
	Code      string   `xml:"Errors>Error>Code"`
	Message   string   `xml:"Errors>Error>Message"`
	RequestID string   `xml:"RequestID"`
}

// base carries the requestId every response starts with.
type base struct {
	RequestID string `xml:"requestId"`
}

func (b *base) setRequestID(id string) { b.RequestID = id }

type requestIDSetter interface{ setRequestID(string) }

func timestamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

type xTag struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

type xGroupID struct {
	GroupID   string `xml:"groupId"`
	GroupName string `xml:"groupName"`
}

type xState struct {
	Code int    `xml:"code"`
	Name string `xml:"name"`
}

type xStateReason struct {
	Code    string `xml:"code"`
	Message string `xml:"message"`
}

type xPlacement struct {
	AvailabilityZone string `xml:"availabilityZone"`
	Tenancy          string `xml:"tenancy"`
}

type xInstance struct {
	InstanceID         string        `xml:"instanceId"`
	ImageID            string        `xml:"imageId"`
	State              xState        `xml:"instanceState"`
	PrivateDNSName     string        `xml:"privateDnsName"`
	DNSName            string        `xml:"dnsName"`
	Reason             string        `xml:"reason"`
	KeyName            string        `xml:"keyName,omitempty"`
	AMILaunchIndex     int           `xml:"amiLaunchIndex"`
	InstanceType       string        `xml:"instanceType"`
	LaunchTime         string        `xml:"launchTime"`
	Placement          xPlacement    `xml:"placement"`
	SubnetID           string        `xml:"subnetId,omitempty"`
	VpcID              string        `xml:"vpcId,omitempty"`
	PrivateIPAddress   string        `xml:"privateIpAddress,omitempty"`
	IPAddress          string        `xml:"ipAddress,omitempty"`
	Groups             []xGroupID    `xml:"groupSet>item"`
	StateReason        *xStateReason `xml:"stateReason,omitempty"`
	Architecture       string        `xml:"architecture"`
	RootDeviceType     string        `xml:"rootDeviceType"`
	RootDeviceName     string        `xml:"rootDeviceName"`
	VirtualizationType string        `xml:"virtualizationType"`
	ClientToken        string        `xml:"clientToken"`
	Tags               []xTag        `xml:"tagSet>item"`
	Hypervisor         string        `xml:"hypervisor"`
}

type xReservation struct {
	ReservationID string      `xml:"reservationId"`
	OwnerID       string      `xml:"ownerId"`
	Groups        []xGroupID  `xml:"groupSet>item"`
	Instances     []xInstance `xml:"instancesSet>item"`
}

type describeInstancesResponse struct {
	base
	Reservations []xReservation `xml:"reservationSet>item"`
	NextToken    string         `xml:"nextToken,omitempty"`
}

type runInstancesResponse struct {
	base
	xReservation
}

type xStateChange struct {
	InstanceID    string `xml:"instanceId"`
	CurrentState  xState `xml:"currentState"`
	PreviousState xState `xml:"previousState"`
}

type stateChangeResponse struct {
	base
	Instances []xStateChange `xml:"instancesSet>item"`
}

type getConsoleOutputResponse struct {
	base
	InstanceID string `xml:"instanceId"`
	Timestamp  string `xml:"timestamp"`
	Output     string `xml:"output,omitempty"`
}

type xZone struct {
	ZoneName           string `xml:"zoneName"`
	ZoneID             string `xml:"zoneId"`
	State              string `xml:"zoneState"`
	RegionName         string `xml:"regionName"`
	ZoneType           string `xml:"zoneType"`
	OptInStatus        string `xml:"optInStatus"`
	GroupName          string `xml:"groupName"`
	NetworkBorderGroup string `xml:"networkBorderGroup"`
}

type describeZonesResponse struct {
	base
	Zones []xZone `xml:"availabilityZoneInfo>item"`
}

type xImage struct {
	ImageID            string `xml:"imageId"`
	ImageLocation      string `xml:"imageLocation"`
	State              string `xml:"imageState"`
	OwnerID            string `xml:"imageOwnerId"`
	CreationDate       string `xml:"creationDate"`
	IsPublic           bool   `xml:"isPublic"`
	Architecture       string `xml:"architecture"`
	ImageType          string `xml:"imageType"`
	Name               string `xml:"name"`
	Description        string `xml:"description"`
	OwnerAlias         string `xml:"imageOwnerAlias,omitempty"`
	RootDeviceType     string `xml:"rootDeviceType"`
	RootDeviceName     string `xml:"rootDeviceName"`
	VirtualizationType string `xml:"virtualizationType"`
	Hypervisor         string `xml:"hypervisor"`
	EnaSupport         bool   `xml:"enaSupport"`
}

type describeImagesResponse struct {
	base
	Images    []xImage `xml:"imagesSet>item"`
	NextToken string   `xml:"nextToken,omitempty"`
}

type xVpc struct {
	VpcID           string `xml:"vpcId"`
	OwnerID         string `xml:"ownerId"`
	State           string `xml:"state"`
	CidrBlock       string `xml:"cidrBlock"`
	DhcpOptionsID   string `xml:"dhcpOptionsId"`
	InstanceTenancy string `xml:"instanceTenancy"`
	IsDefault       bool   `xml:"isDefault"`
	Tags            []xTag `xml:"tagSet>item"`
}

type describeVpcsResponse struct {
	base
	Vpcs      []xVpc `xml:"vpcSet>item"`
	NextToken string `xml:"nextToken,omitempty"`
}

type xSubnet struct {
	SubnetID                string `xml:"subnetId"`
	SubnetArn               string `xml:"subnetArn"`
	State                   string `xml:"state"`
	OwnerID                 string `xml:"ownerId"`
	VpcID                   string `xml:"vpcId"`
	CidrBlock               string `xml:"cidrBlock"`
	AvailableIPAddressCount int    `xml:"availableIpAddressCount"`
	AvailabilityZone        string `xml:"availabilityZone"`
	AvailabilityZoneID      string `xml:"availabilityZoneId"`
	DefaultForAz            bool   `xml:"defaultForAz"`
	MapPublicIPOnLaunch     bool   `xml:"mapPublicIpOnLaunch"`
	Tags                    []xTag `xml:"tagSet>item"`
}

type describeSubnetsResponse struct {
	base
	Subnets   []xSubnet `xml:"subnetSet>item"`
	NextToken string    `xml:"nextToken,omitempty"`
}

type xKeyPair struct {
	KeyPairID   string `xml:"keyPairId"`
	KeyName     string `xml:"keyName"`
	Fingerprint string `xml:"keyFingerprint"`
	KeyType     string `xml:"keyType"`
	PublicKey   string `xml:"publicKey,omitempty"`
	CreateTime  string `xml:"createTime"`
	Tags        []xTag `xml:"tagSet>item"`
}

type importKeyPairResponse struct {
	base
	KeyPairID   string `xml:"keyPairId"`
	KeyName     string `xml:"keyName"`
	Fingerprint string `xml:"keyFingerprint"`
	Tags        []xTag `xml:"tagSet>item"`
}

type describeKeyPairsResponse struct {
	base
	KeyPairs []xKeyPair `xml:"keySet>item"`
}

type returnResponse struct {
	base
	Return bool `xml:"return"`
}

type deleteKeyPairResponse struct {
	base
	Return    bool   `xml:"return"`
	KeyPairID string `xml:"keyPairId,omitempty"`
}

type xIPRange struct {
	CidrIP      string `xml:"cidrIp"`
	Description string `xml:"description,omitempty"`
}

type xIPv6Range struct {
	CidrIPv6    string `xml:"cidrIpv6"`
	Description string `xml:"description,omitempty"`
}

type xPermission struct {
	IPProtocol string       `xml:"ipProtocol"`
	FromPort   *int         `xml:"fromPort,omitempty"`
	ToPort     *int         `xml:"toPort,omitempty"`
	IPRanges   []xIPRange   `xml:"ipRanges>item"`
	IPv6Ranges []xIPv6Range `xml:"ipv6Ranges>item"`
}

type xSecurityGroup struct {
	OwnerID          string        `xml:"ownerId"`
	GroupID          string        `xml:"groupId"`
	GroupName        string        `xml:"groupName"`
	GroupDescription string        `xml:"groupDescription"`
	VpcID            string        `xml:"vpcId"`
	Arn              string        `xml:"securityGroupArn"`
	Ingress          []xPermission `xml:"ipPermissions>item"`
	Egress           []xPermission `xml:"ipPermissionsEgress>item"`
	Tags             []xTag        `xml:"tagSet>item"`
}

type describeSecurityGroupsResponse struct {
	base
	Groups    []xSecurityGroup `xml:"securityGroupInfo>item"`
	NextToken string           `xml:"nextToken,omitempty"`
}

type createSecurityGroupResponse struct {
	base
	Return  bool   `xml:"return"`
	GroupID string `xml:"groupId"`
	Arn     string `xml:"securityGroupArn"`
	Tags    []xTag `xml:"tagSet>item"`
}

type deleteSecurityGroupResponse struct {
	base
	Return  bool   `xml:"return"`
	GroupID string `xml:"groupId"`
}

type xRule struct {
	RuleID      string `xml:"securityGroupRuleId"`
	GroupID     string `xml:"groupId"`
	OwnerID     string `xml:"groupOwnerId"`
	IsEgress    bool   `xml:"isEgress"`
	IPProtocol  string `xml:"ipProtocol"`
	FromPort    int    `xml:"fromPort"`
	ToPort      int    `xml:"toPort"`
	CidrIPv4    string `xml:"cidrIpv4,omitempty"`
	CidrIPv6    string `xml:"cidrIpv6,omitempty"`
	Description string `xml:"description,omitempty"`
	Tags        []xTag `xml:"tagSet>item"`
	Arn         string `xml:"securityGroupRuleArn,omitempty"`
}

type authorizeIngressResponse struct {
	base
	Return bool    `xml:"return"`
	Rules  []xRule `xml:"securityGroupRuleSet>item"`
}

type updateDescriptionsResponse struct {
	base
	Return bool `xml:"return"`
}

type revokeIngressResponse struct {
	base
	Return       bool    `xml:"return"`
	RevokedRules []xRule `xml:"revokedSecurityGroupRuleSet>item"`
}

func xTags(tags map[string]string) []xTag {
	out := make([]xTag, 0, len(tags))
	for _, k := range sortedKeys(tags) {
		out = append(out, xTag{Key: k, Value: tags[k]})
	}
	return out
}

type xTagDescription struct {
	ResourceID   string `xml:"resourceId"`
	ResourceType string `xml:"resourceType"`
	Key          string `xml:"key"`
	Value        string `xml:"value"`
}

type describeTagsResponse struct {
	base
	Tags      []xTagDescription `xml:"tagSet>item"`
	NextToken string            `xml:"nextToken,omitempty"`
}

type xStatusDetail struct {
	Name   string `xml:"name"`
	Status string `xml:"status"`
}

type xStatusSummary struct {
	Status  string          `xml:"status"`
	Details []xStatusDetail `xml:"details>item"`
}

type xInstanceStatus struct {
	InstanceID         string         `xml:"instanceId"`
	AvailabilityZone   string         `xml:"availabilityZone"`
	AvailabilityZoneID string         `xml:"availabilityZoneId"`
	State              xState         `xml:"instanceState"`
	SystemStatus       xStatusSummary `xml:"systemStatus"`
	InstanceStatus     xStatusSummary `xml:"instanceStatus"`
}

type describeInstanceStatusResponse struct {
	base
	Statuses  []xInstanceStatus `xml:"instanceStatusSet>item"`
	NextToken string            `xml:"nextToken,omitempty"`
}

type describeSecurityGroupRulesResponse struct {
	base
	Rules     []xRule `xml:"securityGroupRuleSet>item"`
	NextToken string  `xml:"nextToken,omitempty"`
}
