package aws

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	sdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"golang.org/x/crypto/ssh"

	"github.com/cloudtransit/transit/districts"
)

func filter(name string, values ...string) types.Filter {
	return types.Filter{Name: sdk.String(name), Values: values}
}

// imageID is the district's machine image: aws_image_id, or the newest
// available image named aws_image_name (wildcards allowed) owned by
// aws_image_owner, by default Debian 12's newest. Resolved once per
// driver.
func (drv *driver) imageID(ctx context.Context) (string, error) {
	if drv.d.AWSImageID != "" {
		return drv.d.AWSImageID, nil
	}
	drv.mu.Lock()
	cached := drv.image
	drv.mu.Unlock()
	if cached != "" {
		return cached, nil
	}
	name, owner := drv.d.AWSImageName, drv.d.AWSImageOwner
	if name == "" {
		name, owner = DefaultImageName, DefaultImageOwner
	}
	if owner == "" {
		// Anyone may publish an image under any name: without an owner,
		// only the account's own images are trusted.
		owner = "self"
	}
	var best *types.Image
	var bestAt time.Time
	pg := ec2.NewDescribeImagesPaginator(drv.ec2, &ec2.DescribeImagesInput{
		Owners:     []string{owner},
		Filters:    []types.Filter{filter("name", name), filter("state", "available")},
		MaxResults: sdk.Int32(1000),
	})
	for pg.HasMorePages() {
		out, err := pg.NextPage(ctx)
		if err != nil {
			return "", drv.wrap(fmt.Sprintf("find image %q of owner %q", name, owner), err)
		}
		for i := range out.Images {
			im := &out.Images[i]
			at, err := time.Parse(time.RFC3339, sdk.ToString(im.CreationDate))
			if err != nil {
				continue
			}
			if best == nil || at.After(bestAt) || at.Equal(bestAt) && sdk.ToString(im.Name) > sdk.ToString(best.Name) {
				best, bestAt = im, at
			}
		}
	}
	if best == nil {
		return "", invalid(drv.d, "aws_image_name: no available image named %q owned by %q in %s (aws_image_owner)", name, owner, drv.d.AWSRegion)
	}
	drv.mu.Lock()
	drv.image = sdk.ToString(best.ImageId)
	drv.mu.Unlock()
	return sdk.ToString(best.ImageId), nil
}

// vpcID is the VPC of the district's security group and nodes:
// aws_vpc_id, else the VPC of aws_subnet_ids, else the region's default
// VPC.
func (drv *driver) vpcID(ctx context.Context) (string, error) {
	if drv.d.AWSVPCID != "" {
		return drv.d.AWSVPCID, nil
	}
	drv.mu.Lock()
	cached := drv.vpc
	drv.mu.Unlock()
	if cached != "" {
		return cached, nil
	}
	var vpc string
	if len(drv.d.AWSSubnetIDs) > 0 {
		pl, err := drv.placements(ctx)
		if err != nil {
			return "", err
		}
		vpc = pl.vpc
	} else {
		out, err := drv.ec2.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{Filters: []types.Filter{filter("is-default", "true")}})
		if err != nil {
			return "", drv.wrap("find the default VPC", err)
		}
		if len(out.Vpcs) == 0 {
			return "", invalid(drv.d, "aws_vpc_id: missing, and region %s has no default VPC", drv.d.AWSRegion)
		}
		vpc = sdk.ToString(out.Vpcs[0].VpcId)
	}
	drv.mu.Lock()
	drv.vpc = vpc
	drv.mu.Unlock()
	return vpc, nil
}

// placement is where a node may go: a subnet, in a zone.
type placement struct {
	zone, subnet string
}

// placements are the district's places to spread nodes over, in order,
// and the subnet of every zone of the VPC (for a node whose zone is set).
type placements struct {
	vpc     string
	list    []placement
	byZone  map[string]string
	subnets bool // the list is aws_subnet_ids: count nodes per subnet
}

func (pl *placements) key(zone, subnet string) string {
	if pl.subnets {
		return subnet
	}
	return zone
}

// placements resolves aws_subnet_ids, or the subnets of aws_zones (or of
// every available zone) in the VPC, preferring each zone's default
// subnet. Resolved once per driver.
func (drv *driver) placements(ctx context.Context) (*placements, error) {
	drv.mu.Lock()
	cached := drv.places
	drv.mu.Unlock()
	if cached != nil {
		return cached, nil
	}
	pl := &placements{byZone: map[string]string{}}
	if ids := drv.d.AWSSubnetIDs; len(ids) > 0 {
		out, err := drv.ec2.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: ids})
		if err != nil {
			return nil, drv.wrap("read aws_subnet_ids", err)
		}
		byID := map[string]types.Subnet{}
		for _, sn := range out.Subnets {
			byID[sdk.ToString(sn.SubnetId)] = sn
		}
		for _, id := range ids {
			sn, ok := byID[id]
			if !ok {
				return nil, invalid(drv.d, "aws_subnet_ids: subnet %s not found in %s", id, drv.d.AWSRegion)
			}
			vpc := sdk.ToString(sn.VpcId)
			if pl.vpc != "" && vpc != pl.vpc || drv.d.AWSVPCID != "" && vpc != drv.d.AWSVPCID {
				return nil, invalid(drv.d, "aws_subnet_ids: subnet %s is in VPC %s, not with the others (%s)", id, vpc, cmp.Or(drv.d.AWSVPCID, pl.vpc))
			}
			pl.vpc = vpc
			pl.list = append(pl.list, placement{zone: sdk.ToString(sn.AvailabilityZone), subnet: id})
		}
		pl.subnets = true
	} else {
		vpc, err := drv.vpcID(ctx)
		if err != nil {
			return nil, err
		}
		pl.vpc = vpc
		var all []types.Subnet
		pg := ec2.NewDescribeSubnetsPaginator(drv.ec2, &ec2.DescribeSubnetsInput{
			Filters: []types.Filter{filter("vpc-id", vpc), filter("state", "available")}, MaxResults: sdk.Int32(1000)})
		for pg.HasMorePages() {
			out, err := pg.NextPage(ctx)
			if err != nil {
				return nil, drv.wrap("list the subnets of VPC "+vpc, err)
			}
			all = append(all, out.Subnets...)
		}
		slices.SortFunc(all, func(a, b types.Subnet) int {
			// Each zone's default subnet first, then by id.
			if x, y := sdk.ToBool(a.DefaultForAz), sdk.ToBool(b.DefaultForAz); x != y {
				if x {
					return -1
				}
				return 1
			}
			return strings.Compare(sdk.ToString(a.SubnetId), sdk.ToString(b.SubnetId))
		})
		for _, sn := range all {
			z := sdk.ToString(sn.AvailabilityZone)
			if _, ok := pl.byZone[z]; !ok {
				pl.byZone[z] = sdk.ToString(sn.SubnetId)
			}
		}
		zones := drv.d.AWSZones
		if len(zones) == 0 {
			out, err := drv.ec2.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{
				Filters: []types.Filter{filter("state", "available"), filter("zone-type", "availability-zone")}})
			if err != nil {
				return nil, drv.wrap("list the availability zones", err)
			}
			for _, z := range out.AvailabilityZones {
				zones = append(zones, sdk.ToString(z.ZoneName))
			}
			slices.Sort(zones)
		}
		for _, z := range zones {
			sn, ok := pl.byZone[z]
			switch {
			case ok:
				pl.list = append(pl.list, placement{zone: z, subnet: sn})
			case len(drv.d.AWSZones) > 0:
				return nil, invalid(drv.d, "aws_zones: zone %s has no subnet in VPC %s", z, vpc)
			}
		}
		if len(pl.list) == 0 {
			return nil, invalid(drv.d, "VPC %s in %s has no subnet to launch nodes in (aws_vpc_id)", vpc, drv.d.AWSRegion)
		}
	}
	drv.mu.Lock()
	drv.places = pl
	drv.mu.Unlock()
	return pl, nil
}

// keyName is the EC2 key pair holding the cluster's SSH key.
func keyName(cluster string) string { return "transit-" + cluster }

// keyPair makes sure the cluster's key pair exists and holds key: it is
// imported once, and reused as long as it holds the same public key.
func (drv *driver) keyPair(ctx context.Context, cluster string, tags map[string]string, key string) (string, error) {
	name := keyName(cluster)
	pk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(key))
	if err != nil {
		return "", fmt.Errorf("aws district %q: the cluster's SSH key is not an authorized_keys line: %w", drv.d.ID, err)
	}
	want := string(pk.Marshal())
	drv.mu.Lock()
	ok := drv.keys[name] == want
	drv.mu.Unlock()
	if ok {
		return name, nil
	}
	drv.keyMu.Lock()
	defer drv.keyMu.Unlock()

	check := func() (bool, error) {
		out, err := drv.ec2.DescribeKeyPairs(ctx, &ec2.DescribeKeyPairsInput{KeyNames: []string{name}, IncludePublicKey: sdk.Bool(true)})
		if code(err) == "InvalidKeyPair.NotFound" {
			return false, nil
		}
		if err != nil {
			return false, drv.wrap("read key pair "+name, err)
		}
		if len(out.KeyPairs) == 0 {
			return false, nil
		}
		have, _, _, _, err := ssh.ParseAuthorizedKey([]byte(sdk.ToString(out.KeyPairs[0].PublicKey)))
		if err != nil || string(have.Marshal()) != want {
			return true, fmt.Errorf("aws district %q: key pair %s in %s holds another public key than cluster %s's SSH key: if it is a stale one, delete it (aws ec2 delete-key-pair --region %s --key-name %s)",
				drv.d.ID, name, drv.d.AWSRegion, cluster, drv.d.AWSRegion, name)
		}
		drv.mu.Lock()
		drv.keys[name] = want
		drv.mu.Unlock()
		return true, nil
	}
	if found, err := check(); found || err != nil {
		return name, err
	}
	keyTags := map[string]string{districts.TagCluster: cluster}
	if l := tags[districts.TagLineage]; l != "" {
		keyTags[districts.TagLineage] = l
	}
	_, err = drv.ec2.ImportKeyPair(ctx, &ec2.ImportKeyPairInput{
		KeyName: sdk.String(name), PublicKeyMaterial: ssh.MarshalAuthorizedKey(pk),
		TagSpecifications: []types.TagSpecification{tagSpec(types.ResourceTypeKeyPair, keyTags)},
	})
	switch {
	case code(err) == "InvalidKeyPair.Duplicate":
		// Another transit imported it meanwhile.
		_, err = check()
		return name, err
	case err != nil:
		return "", drv.wrap("import key pair "+name, err)
	}
	drv.mu.Lock()
	drv.keys[name] = want
	drv.mu.Unlock()
	return name, nil
}

func tagSpec(typ types.ResourceType, tags map[string]string) types.TagSpecification {
	ts := types.TagSpecification{ResourceType: typ}
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		ts.Tags = append(ts.Tags, types.Tag{Key: sdk.String(k), Value: sdk.String(tags[k])})
	}
	return ts
}

// userTags are an EC2 resource's tags without those AWS itself sets
// (aws:cloudformation:..., aws:autoscaling:...), which transit never
// wrote.
func userTags(tags []types.Tag) map[string]string {
	m := map[string]string{}
	for _, t := range tags {
		k := sdk.ToString(t.Key)
		if strings.HasPrefix(strings.ToLower(k), "aws:") {
			continue
		}
		m[k] = sdk.ToString(t.Value)
	}
	return m
}
