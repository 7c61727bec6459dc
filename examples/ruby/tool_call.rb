# One tool-calling turn through libel_shim from Ruby, with nothing but the standard library.
#
#   ruby examples/ruby/tool_call.rb MODEL.gguf
#
# The library is $PYSHIM_LIB, or build/libel_shim.so in this checkout.
require "fiddle"
require "fiddle/import"
require "json"

module ElShim
  extend Fiddle::Importer
  dlload ENV["PYSHIM_LIB"] || File.expand_path("../../build/libel_shim.so", __dir__)
  extern "const char *el_version()"
  extern "void *el_open(const char *)"
  extern "const char *el_last_error()"
  extern "char *el_generate(void *, const char *, const char *, const char *)"
  extern "void el_free(char *)"
  extern "int el_close(void *)"

  # Every string the library returns is ours to free, exactly once.
  def self.take(ptr)
    ptr.to_s.dup.force_encoding("UTF-8")
  ensure
    el_free(ptr)
  end
end

model = ARGV.fetch(0) { abort "usage: ruby tool_call.rb MODEL.gguf" }
handle = ElShim.el_open(JSON.generate(model: model, n_ctx: 2048))
abort "el_open failed: #{ElShim.el_last_error}" if handle.null?

begin
  tools = [{
    type: "function",
    function: {
      name: "get_weather", description: "Current weather in a city",
      parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }
    }
  }]
  messages = [{ role: "user", content: "What is the weather in Paris?" }]
  result = JSON.parse(ElShim.take(ElShim.el_generate(handle, JSON.generate(messages), JSON.generate(tools),
                                                     JSON.generate(tool_choice: "required", temperature: 0))))
  puts JSON.generate(result)
  abort "error: #{result["error"]}" if result.key?("error")
  exit(result["tool_calls"].any? { |c| c["function"]["name"] == "get_weather" } ? 0 : 1)
ensure
  ElShim.el_close(handle)
end
