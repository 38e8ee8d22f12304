package bundle

// Images transit's addon manifests run, by their upstream names. A bundle
// carries an image of each name (see package bundle/build), so the same
// manifests serve nodes installed from a bundle and nodes that pull.
const (
	FlannelImage = "ghcr.io/flannel-io/flannel:v0.28.4"
	// FlannelCNIPluginImage is upstream's name; a bundle's image of that
	// name holds the flannel plugin of containernetworking/plugins v0.9.1
	// (see bundle/sources/flannel-cni).
	FlannelCNIPluginImage = "ghcr.io/flannel-io/flannel-cni-plugin:v1.9.1-flannel1"
	CoreDNSImage          = "registry.k8s.io/coredns/coredns:v1.11.3"
	// BusyboxImage is only in bundles: a shell and small tools for
	// workloads of the demo and the tests.
	BusyboxImage = OwnRegistry + "/busybox:1.35.0"
	// RelationsRepository is the relationship controller's image; a
	// bundle's is tagged with the digest of its content (see
	// Manifest.ImageRef).
	RelationsRepository = OwnRegistry + "/relations"
	// The streaming controller's images (the "streams" addon), tagged by
	// content like RelationsRepository's: the controller; the sidecar it
	// runs beside every function; the development broker it runs when no
	// Kafka is given; and an example function (the tests' and the
	// demo's).
	StreamsControllerRepository = OwnRegistry + "/streams-controller"
	StreamsSidecarRepository    = OwnRegistry + "/streams-sidecar"
	StreamsBrokerRepository     = OwnRegistry + "/streams-broker"
	StreamsEchoRepository       = OwnRegistry + "/streams-echo"
)

// OwnRegistry names the images transit builds itself (no registry has
// them): nodes installed from packages import these from a bundle too.
const OwnRegistry = "transit.local"
