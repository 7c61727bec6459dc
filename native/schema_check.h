// schema_check.h -- does a tool call's arguments object match the tool's parameter
// schema? Used to keep calls the model wrote without a grammar honest.
//
// Invariant: a value reported as matching satisfies every keyword this checker knows
// (type, enum, const, properties, required, additionalProperties, items, anyOf/oneOf/
// allOf, minimum/maximum, minItems/maxItems); keywords it does not know are ignored,
// so it may accept more than a full validator would, never less.
#pragma once

#include "json_args.h"

#include <string>

namespace el {

// Empty when `value` matches `schema`; else why not, naming the path ("to_unit must be
// one of "km", "mi", ...").
std::string schema_mismatch(const json & value, const json & schema, const std::string & path = "arguments");

}  // namespace el
