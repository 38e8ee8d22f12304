package relations

import "github.com/cloudtransit/transit/controllers/relations/annotations"

// The annotations API, from package annotations.
const (
	Prefix                    = annotations.Prefix
	AnnotationProvides        = annotations.AnnotationProvides
	AnnotationConsumes        = annotations.AnnotationConsumes
	AnnotationRelationship    = annotations.AnnotationRelationship
	AnnotationConfig          = annotations.AnnotationConfig
	AnnotationAllowNamespaces = annotations.AnnotationAllowNamespaces
	AnnotationProtect         = annotations.AnnotationProtect
	AnnotationPin             = annotations.AnnotationPin
	LabelExpose               = annotations.LabelExpose
	WaitContainer             = annotations.WaitContainer
)

// ControllerUser is the user the addon's controller acts as (its service
// account).
const ControllerUser = "system:serviceaccount:transit-relations:transit-relations"

type (
	// ProviderAnnotations is what a provider's annotations say.
	ProviderAnnotations = annotations.ProviderAnnotations
	// ConsumerAnnotations is what a consumer's annotations say.
	ConsumerAnnotations = annotations.ConsumerAnnotations
	// Request is a provider a consumer names.
	Request = annotations.Request
	// AnnotationError is a malformed annotation.
	AnnotationError = annotations.AnnotationError
)

// Parsers and predicates of package annotations.
var (
	ParseProvider = annotations.ParseProvider
	ParseConsumer = annotations.ParseConsumer
	IsProvider    = annotations.IsProvider
	IsConsumer    = annotations.IsConsumer
)
