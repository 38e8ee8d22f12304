// Package gcebilling is cloudsim's Cloud Billing Catalog API front end
// (cloudbilling.googleapis.com, v1, REST): the part of the API that
// drivers/gce reads for transit prices, in its wire format, so that
// cloud.google.com/go/billing/apiv1's REST client is what gets tested.
// cloudsim/server serves it on the Compute Engine endpoint, beside
// cloudsim/gce, as a gce_endpoint stands for every Google API.
//
// Served:
//
//   - GET /v1/services, with pageSize and pageToken: the catalogue's
//     services (DefaultServices: Compute Engine, Cloud Storage, BigQuery,
//     Kubernetes Engine);
//   - GET /v1/services/{id}/skus, with currencyCode (USD, the default,
//     or one of the currencies of Rates, converted at its rate as the
//     API's currencyConversionRate says), pageSize (at most and by
//     default 5000) and pageToken: the service's SKUs, each with its
//     category, serviceRegions, geoTaxonomy and one pricingInfo of one
//     tiered rate.
//
// A full page carries a nextPageToken bound to its query (used with
// another service or currency it is 400 INVALID_ARGUMENT); the last page
// has none. Enums are numbers when $alt asks for enum-encoding=int, as
// the Go client does, else names.
//
// The built-in catalogue (DefaultCatalogue) holds Compute Engine's
// On-Demand predefined core and RAM SKUs of the N1, E2, N2 and N2D
// families and the f1-micro and g1-small SKUs, in the Americas
// (us-central1, us-east1, us-west1), EMEA (europe-west1; no N2 or N2D
// there) and Frankfurt (europe-west3; N1 and E2 only), at the published
// prices, and decoys a reader must pass over: Preemptible and Spot,
// 1- and 3-year commitments, sole-tenancy and custom cores, a GPU,
// egress, Japan's (asia-northeast1) cores, and Cloud Storage's SKUs.
//
// Every request needs a bearer token that Options.Authorize accepts (nil
// accepts any): 401 UNAUTHENTICATED otherwise. FailPages makes requests
// for a later page fail with 500, as a flaky backend does. Errors are
// Google's JSON errors.
package gcebilling
