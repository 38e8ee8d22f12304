// Package pricing is cloudsim's AWS Price List Query API front end: an
// http.Handler that speaks the service's JSON 1.1 protocol (POST /,
// X-Amz-Target: AWSPriceListService.GetProducts, Content-Type
// application/x-amz-json-1.1, errors as {"__type", "Message"} with
// X-Amzn-ErrorType), so that aws-sdk-go-v2's service/pricing client works
// against it unmodified.
//
// Every request must be signed (Signature Version 4, service "pricing")
// with a key the Server knows, in a region that serves the API
// (us-east-1, eu-central-1, ap-south-1): another region is refused with
// InvalidSignatureException, as AWS does.
//
// Served: GetProducts over a small built-in catalogue (DefaultCatalogue:
// a handful of EC2 instance types in the regions the emulator's tests and
// demos use, each with its Linux On-Demand product and a few products the
// usual filters must exclude: Windows, Dedicated tenancy, unused capacity
// reservations), each answered as the price list's aws_v1 document (product
// attributes, OnDemand and Reserved terms, priceDimensions with
// pricePerUnit USD). Filters: TERM_MATCH, EQUALS, CONTAINS, ANY_OF and
// NONE_OF (comma-separated values) on ServiceCode or any attribute name of
// the catalogue; an unknown field, filter type, format version or a
// MaxResults outside 1..100 is InvalidParameterException, a service code
// other than AmazonEC2 NotFoundException. Pages hold MaxResults products
// (default and at most 100, or Options.PageSize when smaller); a full page
// carries a NextToken, which is bound to its query: used with other
// filters it is InvalidNextTokenException. Every other operation is
// UnknownOperationException.
package pricing
