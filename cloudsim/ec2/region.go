package ec2

import (
	"cmp"
	"crypto/md5" // EC2 fingerprints an imported RSA key with MD5
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// region is one region's resources. Every region starts with a default
// VPC (172.31.0.0/16), a default subnet per zone and the VPC's default
// security group, as an AWS account does.
type region struct {
	name       string
	zones      []string
	vpcs       map[string]*vpc
	subnets    map[string]*subnet
	groups     map[string]*group
	instances  map[string]*instance
	keys       map[string]*keyPair // by name
	tokens     map[string]*clientToken
	defaultVPC string
}

type vpc struct {
	seq       uint64
	id, cidr  string
	isDefault bool
	tags      map[string]string
}

type subnet struct {
	seq                  uint64
	id, vpc, zone, cidr  string
	isDefault, mapPublic bool
	addrs                *pool
	tags                 map[string]string
}

type keyPair struct {
	seq         uint64
	id, name    string
	typ         string // "ed25519" or "rsa"
	fingerprint string
	key         string // authorized_keys line without comment
	created     time.Time
	tags        map[string]string
}

func (s *Server) nextSeq() uint64 {
	s.seq++
	return s.seq
}

// region returns the named region, creating it on first use. Call with
// s.mu held.
func (s *Server) region(name string) *region {
	if rg, ok := s.regions[name]; ok {
		return rg
	}
	rg := &region{
		name: name, vpcs: map[string]*vpc{}, subnets: map[string]*subnet{}, groups: map[string]*group{},
		instances: map[string]*instance{}, keys: map[string]*keyPair{}, tokens: map[string]*clientToken{},
	}
	v := &vpc{seq: s.nextSeq(), id: newID("vpc"), cidr: "172.31.0.0/16", isDefault: true, tags: map[string]string{}}
	rg.vpcs[v.id] = v
	rg.defaultVPC = v.id
	for i := range s.zones {
		zone := name + string(rune('a'+i))
		rg.zones = append(rg.zones, zone)
		cidr := fmt.Sprintf("172.31.%d.0/20", 16*i)
		sn := &subnet{seq: s.nextSeq(), id: newID("subnet"), vpc: v.id, zone: zone, cidr: cidr,
			isDefault: true, mapPublic: true, addrs: newPool(cidr), tags: map[string]string{}}
		rg.subnets[sn.id] = sn
	}
	s.addDefaultGroup(rg, v.id)
	s.regions[name] = rg
	return rg
}

// zoneID is the zone's id, as EC2 names them (eu-central-1a: euc1-az1).
func zoneID(zone string) string {
	i := len(zone) - 1
	parts := strings.Split(zone[:i], "-")
	var b strings.Builder
	b.WriteString(parts[0])
	for _, p := range parts[1 : len(parts)-1] {
		b.WriteByte(p[0])
	}
	b.WriteString(parts[len(parts)-1])
	return b.String() + "-az" + strconv.Itoa(int(zone[i]-'a')+1)
}

func (rg *region) hasZone(z string) bool { return slices.Contains(rg.zones, z) }

// defaultSubnet is the default VPC's subnet in zone ("" if none).
func (rg *region) defaultSubnet(zone string) *subnet {
	for _, sn := range rg.sortedSubnets() {
		if sn.isDefault && sn.vpc == rg.defaultVPC && sn.zone == zone {
			return sn
		}
	}
	return nil
}

func bySeq[T any](m map[string]T, seq func(T) uint64) []T {
	out := slices.Collect(maps.Values(m))
	slices.SortFunc(out, func(a, b T) int { return cmp.Compare(seq(a), seq(b)) })
	return out
}

func (rg *region) sortedInstances() []*instance {
	return bySeq(rg.instances, func(i *instance) uint64 { return i.seq })
}
func (rg *region) sortedGroups() []*group {
	return bySeq(rg.groups, func(g *group) uint64 { return g.seq })
}
func (rg *region) sortedKeys() []*keyPair {
	return bySeq(rg.keys, func(k *keyPair) uint64 { return k.seq })
}
func (rg *region) sortedSubnets() []*subnet {
	return bySeq(rg.subnets, func(s *subnet) uint64 { return s.seq })
}
func (rg *region) sortedVpcs() []*vpc { return bySeq(rg.vpcs, func(v *vpc) uint64 { return v.seq }) }

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// pool hands out the addresses of a prefix: a subnet's private addresses
// (without the four AWS reserves at the start and the broadcast address)
// or the public range.
type pool struct {
	base netip.Addr
	size uint32
	next uint32
	used map[uint32]bool
}

// publicRange is where public addresses come from: the benchmarking
// range of RFC 2544, which is never routed on the internet.
const publicRange = "198.18.0.0/15"

func newPool(cidr string) *pool {
	p := netip.MustParsePrefix(cidr)
	size := uint32(1) << (32 - p.Bits())
	return &pool{base: p.Addr(), size: size, next: 4, used: map[uint32]bool{}}
}

func (p *pool) take() (string, bool) {
	usable := p.size - 5
	for range usable {
		off := p.next
		p.next++
		if p.next >= p.size-1 {
			p.next = 4
		}
		if !p.used[off] {
			p.used[off] = true
			return p.addr(off), true
		}
	}
	return "", false
}

func (p *pool) addr(off uint32) string {
	b := p.base.As4()
	n := binary.BigEndian.Uint32(b[:]) + off
	binary.BigEndian.PutUint32(b[:], n)
	return netip.AddrFrom4(b).String()
}

func (p *pool) release(a string) {
	addr, err := netip.ParseAddr(a)
	if err != nil || !addr.Is4() {
		return
	}
	b, base := addr.As4(), p.base.As4()
	off := binary.BigEndian.Uint32(b[:]) - binary.BigEndian.Uint32(base[:])
	delete(p.used, off)
}

func (p *pool) free() int { return int(p.size) - 5 - len(p.used) }

// --- zones, images, VPCs, subnets ---

func (c *call) describeZones() (requestIDSetter, error) {
	fs, err := c.p.filters()
	if err != nil {
		return nil, err
	}
	names := c.p.list("ZoneName")
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	rg := s.region(c.region)
	for _, n := range names {
		if !rg.hasZone(n) {
			return nil, &apiError{status: 400, code: "InvalidParameterValue", msg: fmt.Sprintf("The zone '%s' does not exist.", n)}
		}
	}
	out := &describeZonesResponse{}
	for _, z := range rg.zones {
		if len(names) > 0 && !slices.Contains(names, z) {
			continue
		}
		ok, err := matchAll(fs, func(f string) ([]string, bool) {
			switch f {
			case "zone-name":
				return []string{z}, true
			case "zone-id":
				return []string{zoneID(z)}, true
			case "region-name":
				return []string{c.region}, true
			case "state":
				return []string{"available"}, true
			case "zone-type":
				return []string{"availability-zone"}, true
			case "opt-in-status":
				return []string{"opt-in-not-required"}, true
			}
			return nil, false
		})
		if err != nil {
			return nil, err
		}
		if ok {
			out.Zones = append(out.Zones, xZone{ZoneName: z, ZoneID: zoneID(z), State: "available", RegionName: c.region,
				ZoneType: "availability-zone", OptInStatus: "opt-in-not-required", GroupName: c.region, NetworkBorderGroup: c.region})
		}
	}
	return out, nil
}

func (s *Server) image(id string) (Image, bool) {
	for _, im := range s.images {
		if im.ID == id {
			return im, true
		}
	}
	return Image{}, false
}

func validID(prefix, id string) bool {
	rest, ok := strings.CutPrefix(id, prefix+"-")
	if !ok || (len(rest) != 8 && len(rest) != 17) {
		return false
	}
	for _, r := range rest {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}

func (c *call) describeImages() (requestIDSetter, error) {
	fs, limit, err := c.describing()
	if err != nil {
		return nil, err
	}
	ids := c.p.list("ImageId")
	owners := c.p.list("Owner")
	s := c.s
	for _, id := range ids {
		if !validID("ami", id) {
			return nil, &apiError{status: 400, code: "InvalidAMIID.Malformed", msg: fmt.Sprintf("Invalid id: \"%s\"", id)}
		}
		if _, ok := s.image(id); !ok {
			return nil, &apiError{status: 400, code: "InvalidAMIID.NotFound", msg: fmt.Sprintf("The image id '[%s]' does not exist", id)}
		}
	}
	type seqImage struct {
		seq uint64
		im  Image
	}
	var matched []seqImage
	for i, im := range s.images {
		if len(ids) > 0 && !slices.Contains(ids, im.ID) {
			continue
		}
		if len(owners) > 0 && !slices.ContainsFunc(owners, func(o string) bool {
			return o == im.OwnerID || o == "self" && im.OwnerID == s.account || o != "" && o == im.OwnerAlias
		}) {
			continue
		}
		ok, err := matchAll(fs, func(f string) ([]string, bool) {
			switch f {
			case "name":
				return []string{im.Name}, true
			case "image-id":
				return []string{im.ID}, true
			case "owner-id":
				return []string{im.OwnerID}, true
			case "owner-alias":
				return []string{im.OwnerAlias}, true
			case "state":
				return []string{"available"}, true
			case "architecture":
				return []string{im.Architecture}, true
			case "is-public":
				return []string{"true"}, true
			case "image-type":
				return []string{"machine"}, true
			case "root-device-type":
				return []string{"ebs"}, true
			case "virtualization-type":
				return []string{"hvm"}, true
			}
			return nil, false
		})
		if err != nil {
			return nil, err
		}
		if ok {
			matched = append(matched, seqImage{uint64(i + 1), im})
		}
	}
	pg, next, err := page(c, matched, func(x seqImage) uint64 { return x.seq }, limit)
	if err != nil {
		return nil, err
	}
	out := &describeImagesResponse{NextToken: next}
	for _, x := range pg {
		im := x.im
		out.Images = append(out.Images, xImage{
			ImageID: im.ID, ImageLocation: im.OwnerID + "/" + im.Name, State: "available", OwnerID: im.OwnerID,
			CreationDate: timestamp(im.CreationDate), IsPublic: true, Architecture: im.Architecture, ImageType: "machine",
			Name: im.Name, Description: im.Name, OwnerAlias: im.OwnerAlias, RootDeviceType: "ebs", RootDeviceName: "/dev/xvda",
			VirtualizationType: "hvm", Hypervisor: "xen", EnaSupport: true,
		})
	}
	return out, nil
}

func (c *call) describeVpcs() (requestIDSetter, error) {
	fs, limit, err := c.describing()
	if err != nil {
		return nil, err
	}
	ids := c.p.list("VpcId")
	s := c.s
	s.mu.Lock()
	rg := s.region(c.region)
	for _, id := range ids {
		if rg.vpcs[id] == nil {
			s.mu.Unlock()
			return nil, &apiError{status: 400, code: "InvalidVpcID.NotFound", msg: fmt.Sprintf("The vpc ID '%s' does not exist", id)}
		}
	}
	var matched []*vpc
	for _, v := range rg.sortedVpcs() {
		if len(ids) > 0 && !slices.Contains(ids, v.id) {
			continue
		}
		ok, err := matchAll(fs, func(f string) ([]string, bool) {
			switch f {
			case "vpc-id":
				return []string{v.id}, true
			case "is-default", "isDefault":
				return []string{strconv.FormatBool(v.isDefault)}, true
			case "state":
				return []string{"available"}, true
			case "cidr", "cidr-block-association.cidr-block":
				return []string{v.cidr}, true
			case "owner-id":
				return []string{s.account}, true
			}
			return tagAttrs(v.tags, f)
		})
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
		if ok {
			matched = append(matched, v)
		}
	}
	s.mu.Unlock()
	pg, next, err := page(c, matched, func(v *vpc) uint64 { return v.seq }, limit)
	if err != nil {
		return nil, err
	}
	out := &describeVpcsResponse{NextToken: next}
	for _, v := range pg {
		out.Vpcs = append(out.Vpcs, xVpc{VpcID: v.id, OwnerID: s.account, State: "available", CidrBlock: v.cidr,
			DhcpOptionsID: "dopt-" + v.id[4:12], InstanceTenancy: "default", IsDefault: v.isDefault, Tags: xTags(v.tags)})
	}
	return out, nil
}

func (c *call) describeSubnets() (requestIDSetter, error) {
	fs, limit, err := c.describing()
	if err != nil {
		return nil, err
	}
	ids := c.p.list("SubnetId")
	s := c.s
	s.mu.Lock()
	rg := s.region(c.region)
	for _, id := range ids {
		if rg.subnets[id] == nil {
			s.mu.Unlock()
			return nil, &apiError{status: 400, code: "InvalidSubnetID.NotFound", msg: fmt.Sprintf("The subnet ID '%s' does not exist", id)}
		}
	}
	var matched []*subnet
	for _, sn := range rg.sortedSubnets() {
		if len(ids) > 0 && !slices.Contains(ids, sn.id) {
			continue
		}
		ok, err := matchAll(fs, func(f string) ([]string, bool) {
			switch f {
			case "subnet-id":
				return []string{sn.id}, true
			case "vpc-id":
				return []string{sn.vpc}, true
			case "availability-zone", "availabilityZone":
				return []string{sn.zone}, true
			case "availability-zone-id":
				return []string{zoneID(sn.zone)}, true
			case "default-for-az", "defaultForAz":
				return []string{strconv.FormatBool(sn.isDefault)}, true
			case "map-public-ip-on-launch":
				return []string{strconv.FormatBool(sn.mapPublic)}, true
			case "state":
				return []string{"available"}, true
			case "cidr-block", "cidr", "cidrBlock":
				return []string{sn.cidr}, true
			case "owner-id":
				return []string{s.account}, true
			}
			return tagAttrs(sn.tags, f)
		})
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
		if ok {
			matched = append(matched, sn)
		}
	}
	xs := make([]xSubnet, 0, len(matched))
	for _, sn := range matched {
		xs = append(xs, xSubnet{SubnetID: sn.id, SubnetArn: fmt.Sprintf("arn:aws:ec2:%s:%s:subnet/%s", c.region, s.account, sn.id),
			State: "available", OwnerID: s.account, VpcID: sn.vpc, CidrBlock: sn.cidr, AvailableIPAddressCount: sn.addrs.free(),
			AvailabilityZone: sn.zone, AvailabilityZoneID: zoneID(sn.zone), DefaultForAz: sn.isDefault, MapPublicIPOnLaunch: sn.mapPublic,
			Tags: xTags(sn.tags)})
	}
	seqs := map[string]uint64{}
	for _, sn := range matched {
		seqs[sn.id] = sn.seq
	}
	s.mu.Unlock()
	pg, next, err := page(c, xs, func(x xSubnet) uint64 { return seqs[x.SubnetID] }, limit)
	if err != nil {
		return nil, err
	}
	return &describeSubnetsResponse{Subnets: pg, NextToken: next}, nil
}

// --- key pairs ---

func invalidKey() *apiError {
	return &apiError{status: 400, code: "InvalidKey.Format", msg: "Key is not in valid OpenSSH public key format"}
}

// parseKeyMaterial reads ImportKeyPair's material (the SDK sends it
// base64-encoded): an OpenSSH ed25519 or RSA public key, the two types EC2
// imports.
func parseKeyMaterial(b64 string) (typ, line, fingerprint string, err error) {
	raw, derr := base64.StdEncoding.DecodeString(b64)
	if derr != nil {
		return "", "", "", invalidKey()
	}
	pk, _, _, _, perr := ssh.ParseAuthorizedKey(raw)
	if perr != nil {
		return "", "", "", invalidKey()
	}
	line = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pk)))
	switch pk.Type() {
	case ssh.KeyAlgoED25519:
		sum := sha256.Sum256(pk.Marshal())
		return "ed25519", line, base64.StdEncoding.EncodeToString(sum[:]), nil
	case ssh.KeyAlgoRSA:
		ck, ok := pk.(ssh.CryptoPublicKey)
		if !ok {
			return "", "", "", invalidKey()
		}
		der, merr := x509.MarshalPKIXPublicKey(ck.CryptoPublicKey())
		if merr != nil {
			return "", "", "", invalidKey()
		}
		sum := md5.Sum(der)
		parts := make([]string, len(sum))
		for i, b := range sum {
			parts[i] = fmt.Sprintf("%02x", b)
		}
		return "rsa", line, strings.Join(parts, ":"), nil
	}
	return "", "", "", invalidKey()
}

func (c *call) importKeyPair() (requestIDSetter, error) {
	name := c.p.get("KeyName")
	if name == "" {
		return nil, missing("KeyName")
	}
	if !c.p.has("PublicKeyMaterial") {
		return nil, missing("PublicKeyMaterial")
	}
	tags, err := c.p.tagSpecs("key-pair")
	if err != nil {
		return nil, err
	}
	typ, line, fp, err := parseKeyMaterial(c.p.get("PublicKeyMaterial"))
	if err != nil {
		return nil, err
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	rg := s.region(c.region)
	if _, dup := rg.keys[name]; dup {
		return nil, &apiError{status: 400, code: "InvalidKeyPair.Duplicate", msg: fmt.Sprintf("The keypair '%s' already exists.", name)}
	}
	k := &keyPair{seq: s.nextSeq(), id: newID("key"), name: name, typ: typ, fingerprint: fp, key: line, created: s.now(), tags: tags}
	rg.keys[name] = k
	return &importKeyPairResponse{KeyPairID: k.id, KeyName: name, Fingerprint: fp, Tags: xTags(tags)}, nil
}

func (c *call) describeKeyPairs() (requestIDSetter, error) {
	fs, err := c.p.filters()
	if err != nil {
		return nil, err
	}
	withKey, err := c.p.bool("IncludePublicKey")
	if err != nil {
		return nil, err
	}
	names, ids := c.p.list("KeyName"), c.p.list("KeyPairId")
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	rg := s.region(c.region)
	for _, n := range names {
		if rg.keys[n] == nil {
			return nil, &apiError{status: 400, code: "InvalidKeyPair.NotFound", msg: fmt.Sprintf("The key pair '%s' does not exist", n)}
		}
	}
	for _, id := range ids {
		if !slices.ContainsFunc(rg.sortedKeys(), func(k *keyPair) bool { return k.id == id }) {
			return nil, &apiError{status: 400, code: "InvalidKeyPair.NotFound", msg: fmt.Sprintf("The key pair '%s' does not exist", id)}
		}
	}
	out := &describeKeyPairsResponse{}
	for _, k := range rg.sortedKeys() {
		if len(names) > 0 && !slices.Contains(names, k.name) || len(ids) > 0 && !slices.Contains(ids, k.id) {
			continue
		}
		ok, err := matchAll(fs, func(f string) ([]string, bool) {
			switch f {
			case "key-name":
				return []string{k.name}, true
			case "key-pair-id":
				return []string{k.id}, true
			case "fingerprint":
				return []string{k.fingerprint}, true
			case "key-type":
				return []string{k.typ}, true
			}
			return tagAttrs(k.tags, f)
		})
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		x := xKeyPair{KeyPairID: k.id, KeyName: k.name, Fingerprint: k.fingerprint, KeyType: k.typ,
			CreateTime: timestamp(k.created), Tags: xTags(k.tags)}
		if withKey {
			x.PublicKey = k.key + " " + k.name
		}
		out.KeyPairs = append(out.KeyPairs, x)
	}
	return out, nil
}

// deleteKeyPair succeeds for a missing key pair too, as EC2's does.
func (c *call) deleteKeyPair() (requestIDSetter, error) {
	name, id := c.p.get("KeyName"), c.p.get("KeyPairId")
	if name == "" && id == "" {
		return nil, missing("KeyName")
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	rg := s.region(c.region)
	out := &deleteKeyPairResponse{Return: true}
	for n, k := range rg.keys {
		if n == name || k.id == id {
			out.KeyPairID = k.id
			delete(rg.keys, n)
		}
	}
	return out, nil
}

// --- tags ---

// taggable finds a resource's tag map by id. Call with s.mu held.
func (rg *region) taggable(id string) (map[string]string, bool) {
	switch {
	case rg.instances[id] != nil:
		return rg.instances[id].tags, true
	case rg.groups[id] != nil:
		return rg.groups[id].tags, true
	case rg.vpcs[id] != nil:
		return rg.vpcs[id].tags, true
	case rg.subnets[id] != nil:
		return rg.subnets[id].tags, true
	}
	for _, k := range rg.keys {
		if k.id == id {
			return k.tags, true
		}
	}
	if strings.HasPrefix(id, "sgr-") {
		for _, g := range rg.groups {
			for _, r := range slices.Concat(g.ingress, g.egress) {
				if r.id == id {
					return r.tags, true
				}
			}
		}
	}
	return nil, false
}

func notFoundID(id string) *apiError {
	kind, _, _ := strings.Cut(id, "-")
	codes := map[string]string{"i": "InvalidInstanceID.NotFound", "sg": "InvalidGroup.NotFound",
		"vpc": "InvalidVpcID.NotFound", "subnet": "InvalidSubnetID.NotFound", "key": "InvalidKeyPair.NotFound",
		"sgr": "InvalidSecurityGroupRuleId.NotFound"}
	code, ok := codes[kind]
	if !ok {
		return &apiError{status: 400, code: "InvalidID", msg: fmt.Sprintf("The ID '%s' is not valid", id)}
	}
	return &apiError{status: 400, code: code, msg: fmt.Sprintf("The ID '%s' does not exist", id)}
}

func (c *call) createTags() (requestIDSetter, error) {
	ids := c.p.list("ResourceId")
	if len(ids) == 0 {
		return nil, missing("ResourceId")
	}
	tags, err := readTags(c.p.structs("Tag"), false)
	if err != nil {
		return nil, err
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	rg := s.region(c.region)
	for _, id := range ids {
		t, ok := rg.taggable(id)
		if !ok {
			return nil, notFoundID(id)
		}
		n := len(t)
		for k := range tags {
			if _, has := t[k]; !has {
				n++
			}
		}
		if n > maxTags {
			return nil, tagLimit()
		}
	}
	for _, id := range ids {
		t, _ := rg.taggable(id)
		maps.Copy(t, tags)
	}
	return &returnResponse{Return: true}, nil
}

// deleteTags removes the named tags; a Tag.N.Value, when given, must match.
func (c *call) deleteTags() (requestIDSetter, error) {
	ids := c.p.list("ResourceId")
	if len(ids) == 0 {
		return nil, missing("ResourceId")
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	rg := s.region(c.region)
	for _, id := range ids {
		if _, ok := rg.taggable(id); !ok {
			return nil, notFoundID(id)
		}
	}
	for _, id := range ids {
		t, _ := rg.taggable(id)
		for _, tag := range c.p.structs("Tag") {
			k := tag.get("Key")
			if v, ok := tag["Value"]; ok && t[k] != v {
				continue
			}
			delete(t, k)
		}
	}
	return &returnResponse{Return: true}, nil
}
