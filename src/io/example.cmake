# The tf.train.Example codec, the batch layout and its buffers (included by src/io/CMakeLists.txt).
target_sources(croupier_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/dtype.cc
  ${CMAKE_CURRENT_LIST_DIR}/feature_spec.cc
  ${CMAKE_CURRENT_LIST_DIR}/example_wire.cc
  ${CMAKE_CURRENT_LIST_DIR}/example_parse.cc
  ${CMAKE_CURRENT_LIST_DIR}/example_encode.cc
  ${CMAKE_CURRENT_LIST_DIR}/batch_builder.cc
  ${CMAKE_CURRENT_LIST_DIR}/batch_layout.cc
  ${CMAKE_CURRENT_LIST_DIR}/buffer_pool.cc
  ${CMAKE_CURRENT_LIST_DIR}/batch_view.cc
  ${CMAKE_CURRENT_LIST_DIR}/batch_hash.cc)

# libprotobuf is for test cross-checks and the benchmark's baseline only: the library parses the
# wire format by hand and must not link it.
if(CROUPIER_BUILD_TESTS OR CROUPIER_BUILD_BENCH)
  find_package(Protobuf REQUIRED)
  add_library(croupier_example_testproto STATIC
    ${CMAKE_CURRENT_LIST_DIR}/testdata_example.proto
    ${CMAKE_CURRENT_LIST_DIR}/testdata_example_unpacked.proto)
  set(croupier_example_proto_out ${CMAKE_CURRENT_BINARY_DIR}/example_testproto)
  file(MAKE_DIRECTORY ${croupier_example_proto_out})
  protobuf_generate(TARGET croupier_example_testproto LANGUAGE cpp
    IMPORT_DIRS ${CMAKE_CURRENT_LIST_DIR}
    PROTOC_OUT_DIR ${croupier_example_proto_out})
  target_include_directories(croupier_example_testproto PUBLIC ${croupier_example_proto_out})
  target_link_libraries(croupier_example_testproto PUBLIC protobuf::libprotobuf)
endif()

croupier_test(example_test
  ${CMAKE_CURRENT_LIST_DIR}/feature_spec_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/example_parse_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/example_malformed_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/example_protobuf_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/example_tfrecord_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/batch_builder_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/batch_view_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/buffer_pool_test.cc)
if(TARGET example_test)
  target_link_libraries(example_test PRIVATE croupier_example_testproto)
endif()
