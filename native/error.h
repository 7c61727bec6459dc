// error.h -- what failed, by class: the one exception type that carries an el_code.
//
// Invariant: whatever reaches the C entry points (el_shim.cpp, the one place exceptions
// stop) says which el_code it is. A throw site that knows the class throws el::Error with
// it (fail() in json_args.h for the caller's mistakes); an exception of any other type is
// classed by where it stopped: while a request was read (Engine::prepare) it was the
// input's (EL_E_INVALID), while a model was opened EL_E_LOAD, anywhere else EL_E_INTERNAL.
#pragma once

#include "el_shim.h"

#include <stdexcept>
#include <string>

namespace el {

struct Error : std::runtime_error {
    el_code code;

    Error(el_code c, const std::string & msg) : std::runtime_error(msg), code(c) {}
};

// The caller's mistake (EL_E_INVALID): what fail() throws.
struct UserError : Error {
    explicit UserError(const std::string & msg) : Error(EL_E_INVALID, msg) {}
};

[[noreturn]] inline void fail(el_code code, const std::string & msg) { throw Error(code, msg); }

// The error object of the ABI: {"error": msg, "code": code}, as JSON text.
std::string error_json(el_code code, const std::string & msg);

}  // namespace el
