// owner.h -- who cached state belongs to: a session, alone or within a named trust scope.
//
// Invariant: two owners are the same only if their scope (named or not) and their session
// are; the key() of two different owners differs, so that the request caches keyed by it
// (message reads, tokenized prompts, template values) never mix tenants whose sessions
// share a name. Only owners of the same named scope may start from each other's prefixes
// (slots.h, share()); an owner outside any named scope shares with no other session, as
// before scopes existed (ABI 1.10).
#pragma once

#include "json_args.h"

#include <optional>
#include <string>

namespace el {

struct Owner {
    std::string scope;    // the named scope ("" may be a name too); unused when !scoped
    std::string session;  // "" = the pool of calls that name no session (of the scope, if any)
    bool        scoped = false;

    // A pinned owner keeps its conversation in a slot of its own; the pool's calls are routed
    // by prefix among the pool's slots.
    bool pinned() const { return !session.empty(); }

    // Whether this owner may start from a prefix the other one holds.
    bool shares_with(const Owner & o) const { return scoped && o.scoped && scope == o.scope; }

    bool operator==(const Owner & o) const { return scoped == o.scoped && scope == o.scope && session == o.session; }
    bool operator!=(const Owner & o) const { return !(*this == o); }

    // The scope's length leads, so no owner spells another's key.
    std::string key() const {
        return (scoped ? "s" + std::to_string(scope.size()) + ':' + scope : std::string("-")) + session;
    }
};

// The owner named by a call's options "scope" and "session" (anything but strings: unset),
// a call naming no scope taking the handle's default (config "scope").
inline Owner read_owner(const json & opt, const std::optional<std::string> & default_scope) {
    const json * session = opt.is_object() ? find(opt, "session") : nullptr;
    const json * scope   = opt.is_object() ? find(opt, "scope") : nullptr;
    Owner o;
    o.session = session != nullptr && session->is_string() ? session->get<std::string>() : "";
    if (scope != nullptr && scope->is_string()) {
        o.scope = scope->get<std::string>(), o.scoped = true;
    } else if (default_scope) {
        o.scope = *default_scope, o.scoped = true;
    }
    return o;
}

}  // namespace el
