use super::*;

#[test]
fn cache_shapes_split_into_blocks() {
    assert_eq!(split_cache_shape(&[10, 8448], 1, 8448), Some((1, 10)));
    assert_eq!(split_cache_shape(&[10, 64, 132], 1, 8448), Some((1, 10)));
    assert_eq!(split_cache_shape(&[61, 10, 64, 132], 1, 8448), Some((61, 10)));
    assert_eq!(split_cache_shape(&[84480], 1, 8448), Some((1, 10)));
    assert_eq!(split_cache_shape(&[10, 8000], 1, 8448), None);
    assert_eq!(split_cache_shape(&[3, 4, 10, 8448], 1, 8448), None);
}

#[test]
fn physical_slots_map_back_through_the_table() {
    let table = [7, 3, 9];
    assert_eq!(physical_to_logical(3 * 64 + 5, &table, 64), Some(64 + 5));
    assert_eq!(physical_to_logical(4 * 64, &table, 64), None);
}
