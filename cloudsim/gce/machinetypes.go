package gce

import (
	"fmt"
	"strconv"
	"strings"
)

// machineTypeSpec is what machineTypes.get says of a predefined machine
// type: its vCPUs, memory in MB (Compute Engine's MB are MiB) and whether
// its cores are shared.
type machineTypeSpec struct {
	cpus, memoryMB int
	shared         bool
}

// memoryPerCPU is the MB per vCPU of the predefined shapes the emulator
// knows: the families' published ratios (n1-standard 3.75 GB, n1-highmem
// 6.5 GB; the newer families 4, 8 and 1 GB, c3-highcpu 2 GB).
var memoryPerCPU = map[string]int{
	"n1-standard": 3840, "n1-highmem": 6656,
	"e2-standard": 4096, "e2-highmem": 8192, "e2-highcpu": 1024,
	"n2-standard": 4096, "n2-highmem": 8192, "n2-highcpu": 1024,
	"n2d-standard": 4096, "n2d-highmem": 8192, "n2d-highcpu": 1024,
	"c2-standard": 4096, "t2d-standard": 4096,
	"c3-standard": 4096, "c3-highmem": 8192, "c3-highcpu": 2048,
}

// sharedCore are the shared-core types, as Compute Engine describes them.
var sharedCore = map[string]machineTypeSpec{
	"e2-micro":  {2, 1024, true},
	"e2-small":  {2, 2048, true},
	"e2-medium": {2, 4096, true},
	"f1-micro":  {1, 614, true},
	"g1-small":  {1, 1740, true},
}

// lookupMachineType is a predefined machine type's shape, false for a
// name the emulator does not know (such as a custom type).
func lookupMachineType(name string) (machineTypeSpec, bool) {
	if s, ok := sharedCore[name]; ok {
		return s, true
	}
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return machineTypeSpec{}, false
	}
	per, ok := memoryPerCPU[name[:i]]
	n, err := strconv.Atoi(name[i+1:])
	if !ok || err != nil || n < 1 || n > 96 || n > 1 && n%2 != 0 || n == 1 && !strings.HasPrefix(name, "n1-standard") {
		return machineTypeSpec{}, false
	}
	return machineTypeSpec{cpus: n, memoryMB: n * per}, true
}

// machineTypeJSON is a machine type's JSON (the fields drivers/gce reads and
// a few more).
type machineTypeJSON struct {
	Kind                         string `json:"kind"`
	ID                           string `json:"id"`
	Name                         string `json:"name"`
	Description                  string `json:"description"`
	GuestCpus                    int    `json:"guestCpus"`
	MemoryMb                     int    `json:"memoryMb"`
	IsSharedCPU                  bool   `json:"isSharedCpu"`
	MaximumPersistentDisks       int    `json:"maximumPersistentDisks"`
	MaximumPersistentDisksSizeGb string `json:"maximumPersistentDisksSizeGb"`
	Zone                         string `json:"zone"`
	SelfLink                     string `json:"selfLink"`
}

// getMachineType answers machineTypes.get: a predefined type in any zone
// of the emulator's shape, 404 for another name.
func (c *call) getMachineType() (any, error) {
	zone, err := c.zone()
	if err != nil {
		return nil, err
	}
	name := c.rest[3]
	spec, ok := lookupMachineType(name)
	if !ok {
		return nil, notFound(fmt.Sprintf("projects/%s/zones/%s/machineTypes/%s", c.project, zone, name))
	}
	desc := fmt.Sprintf("%d vCPU%s, %s GB RAM", spec.cpus, plural(spec.cpus), strconv.FormatFloat(float64(spec.memoryMB)/1024, 'f', -1, 64))
	if spec.shared {
		desc = "Shared-core machine type: " + desc
	}
	id := uint64(0)
	for _, b := range []byte(name) {
		id = id*131 + uint64(b)
	}
	return machineTypeJSON{Kind: "compute#machineType", ID: strconv.FormatUint(1_000_000_000+id%1_000_000_000, 10), Name: name,
		Description: desc, GuestCpus: spec.cpus, MemoryMb: spec.memoryMB, IsSharedCPU: spec.shared,
		MaximumPersistentDisks: 128, MaximumPersistentDisksSizeGb: "263168",
		Zone: zone, SelfLink: c.link("zones", zone, "machineTypes", name)}, nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
