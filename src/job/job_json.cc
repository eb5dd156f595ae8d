#include "src/job/job_json.h"

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/struct.pb.h"
#include "src/common/status_macros.h"
#include "src/job/job_settings.h"

namespace croupier {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Value;

// kToTextNumbers is kToText that also writes the 64-bit integers as JSON numbers (see
// ToUserJson).
enum class Direction { kToText, kToTextNumbers, kFromText };

// A 64-bit integer field's JSON text ("43") as a number, when a double holds it exactly.
void Int64AsNumber(const FieldDescriptor* field, Value& value) {
  const auto type = field->cpp_type();
  if ((type != FieldDescriptor::CPPTYPE_INT64 && type != FieldDescriptor::CPPTYPE_UINT64) ||
      value.kind_case() != Value::kStringValue) {
    return;
  }
  constexpr double kExact = 9007199254740992.0;  // 2^53
  char* end = nullptr;
  const std::string& text = value.string_value();
  const double number = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || number > kExact || number < -kExact) return;
  value.set_number_value(number);
}

absl::Status Rename(const Descriptor* type, Value& value, Direction direction);

// One field's JSON value.
absl::Status RenameField(const FieldDescriptor* field, Value& value, Direction direction) {
  if (field->message_type() != nullptr) {
    if (field->is_map()) return absl::OkStatus();  // none of the settings is in a map
    return Rename(field->message_type(), value, direction);
  }
  if (direction == Direction::kToTextNumbers) Int64AsNumber(field, value);
  if (field->enum_type() == nullptr || !IsSettingEnum(field->enum_type()) ||
      value.kind_case() != Value::kStringValue) {
    return absl::OkStatus();
  }
  if (direction != Direction::kFromText) {
    const google::protobuf::EnumValueDescriptor* named =
        field->enum_type()->FindValueByName(value.string_value());
    if (named != nullptr) value.set_string_value(SettingText(field->enum_type(), named->number()));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(int number, SettingNumber(field->enum_type(), value.string_value()));
  value.set_string_value(field->enum_type()->FindValueByNumber(number)->name());
  return absl::OkStatus();
}

// Renames the settings in `value`, the JSON of a message of type `type` (and of the messages
// inside it), in `direction`.
absl::Status Rename(const Descriptor* type, Value& value, Direction direction) {
  if (value.kind_case() == Value::kListValue) {
    for (Value& item : *value.mutable_list_value()->mutable_values()) {
      RETURN_IF_ERROR(Rename(type, item, direction));
    }
    return absl::OkStatus();
  }
  if (value.kind_case() != Value::kStructValue) return absl::OkStatus();
  auto& fields = *value.mutable_struct_value()->mutable_fields();
  for (int i = 0; i < type->field_count(); ++i) {
    const FieldDescriptor* field = type->field(i);
    for (const std::string& key : {field->name(), field->json_name()}) {
      auto it = fields.find(key);
      if (it == fields.end()) continue;
      if (field->is_repeated() && !field->is_map() && it->second.kind_case() == Value::kListValue) {
        for (Value& item : *it->second.mutable_list_value()->mutable_values()) {
          RETURN_IF_ERROR(RenameField(field, item, direction));
        }
      } else {
        RETURN_IF_ERROR(RenameField(field, it->second, direction));
      }
      break;
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string ToUserJson(const google::protobuf::Message& message,
                       const google::protobuf::util::JsonPrintOptions& options,
                       bool int64_as_numbers) {
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  Value value;
  const Direction direction = int64_as_numbers ? Direction::kToTextNumbers : Direction::kToText;
  if (!google::protobuf::util::JsonStringToMessage(json, &value).ok() ||
      !Rename(message.GetDescriptor(), value, direction).ok()) {
    return json;  // cannot happen: protobuf's own JSON reads back
  }
  google::protobuf::util::JsonPrintOptions value_options;
  value_options.add_whitespace = options.add_whitespace;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(value, &out, value_options);
  return out;
}

absl::Status FromUserJson(absl::string_view json, google::protobuf::Message* message) {
  Value value;
  if (auto s = google::protobuf::util::JsonStringToMessage(std::string(json), &value); !s.ok()) {
    return absl::InvalidArgumentError(std::string(s.message()));
  }
  RETURN_IF_ERROR(Rename(message->GetDescriptor(), value, Direction::kFromText));
  std::string renamed;
  (void)google::protobuf::util::MessageToJsonString(value, &renamed);
  if (auto s = google::protobuf::util::JsonStringToMessage(renamed, message); !s.ok()) {
    return absl::InvalidArgumentError(std::string(s.message()));
  }
  return absl::OkStatus();
}

}  // namespace croupier
