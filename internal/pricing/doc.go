// Package pricing is the price table of model tokens: what a model's usage costs, exactly, in micro-units
// of the table's currency, and the table's id. A pure leaf over domain, imported by tasks.
package pricing
