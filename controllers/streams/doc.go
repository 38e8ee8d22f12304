// Package streams is the streaming controller: teams own TopologyParts, a
// Topology pins a revision of each, and the controller runs the composed
// pipeline on Kafka, one Deployment per processor (the team's function and
// the sidecar that feeds it, see package sidecar).
//
// Three steps, each re-derived on every reconcile from the API server and
// Kafka, so a crash between any two writes is picked up where it stopped:
//
//   - Updater: composes the pinned part revisions (package topology); an
//     invalid composition is reported (Valid=False) and changes nothing that
//     runs. A new composition becomes a TopologyRevision, named by its
//     content and predecessor, and the Topology's `next`.
//   - Syncer: keeps the Deployments of the active revision, of the next one
//     (standby upgrades start it whole, its source readers held until the
//     switch), and of what still drains. Once every pod of `next` is Ready it
//     deletes the old source readers; once their pods are gone and Kafka
//     shows their groups empty, it records and commits where the new source
//     readers start, and switches: one status write with a resourceVersion
//     precondition moves next to active and active to phasingOut.
//   - Garbage collector: in a phasing-out revision, a processor none of
//     whose predecessors runs and whose group has read its input to the end
//     (exactly-once: with no transaction open on it) is deleted, with its
//     group; a topic once its writer and readers are gone. Nothing is
//     collected while Kafka cannot be asked.
//
// Exactly-once, before those steps: a transaction left open by a sidecar
// killed inside it whose pod is gone (no restart will fence it) is
// aborted, since it holds back every read-committed reader of what it
// wrote, the steps' reads of Kafka included.
package streams

// Labels, annotations and finalizers on the controller's objects.
const (
	Prefix = "streams.transit.io/"
	// LabelTopology, LabelRevision and LabelProcessor mark a processor's
	// Deployment and pods.
	LabelTopology  = Prefix + "topology"
	LabelRevision  = Prefix + "revision"
	LabelProcessor = Prefix + "processor"
	// LabelPart marks a TopologyPartRevision with its part.
	LabelPart = Prefix + "part"
	// LabelInUse marks a TopologyPartRevision that must not be deleted;
	// AnnotationUsedBy names who uses it (the admission policy says so).
	LabelInUse       = Prefix + "in-use"
	AnnotationUsedBy = Prefix + "used-by"
	// FinalizerKafka holds a Topology until its topics and groups are gone.
	FinalizerKafka = Prefix + "kafka"
	// AnnotationSkipKafkaCleanup on a Topology lets it go without cleaning
	// Kafka (a Kafka that is gone for good).
	AnnotationSkipKafkaCleanup = Prefix + "skip-kafka-cleanup"
	// ProcessorAccount is the service account processor pods run as: its
	// sidecar watches the Topology to learn when its revision is active.
	ProcessorAccount = "transit-streams-processor"
)
